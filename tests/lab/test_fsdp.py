"""FSDP2 (fully_shard) on two gloo ranks: loss and gradients equal the one-rank run.

T5 (a table every layer shares, kept replicated) takes the large-model flow: built on the
meta device, sharded, then allocated; Shaw (per-layer tables, sharded) is built in place.

Each rank holds half of the batch; FSDP averages the gradients of the sharded parameters
and fully_shard_model's hook those of the shared encoding, so the global gradient is that
of the mean loss over the whole batch. float32: the two halves are summed in another order
than one pass over the batch, so ``assert_close``'s float32 tolerance.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.testing import assert_close

from posenc.lab.distributed import fully_shard_model, spawn
from posenc.models import DecoderLM, ModelConfig

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed gloo missing"
)

#: An encoding whose table every layer shares (kept replicated), and one per layer (sharded).
ENCODINGS = ("t5", "shaw")
BATCH, SEQ, VOCAB = 4, 16, 50


def make_model(pos: str) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(ModelConfig(vocab_size=VOCAB, dim=32, depth=2, num_heads=4, pos=pos))


def lm_loss(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def shard_on_meta(reference: DecoderLM) -> DecoderLM:
    """The large-model flow: build on the meta device, shard, allocate the shards
    (``to_empty``), then fill them (here with the reference's values)."""
    with torch.device("meta"):
        model = DecoderLM(reference.config)
    assert fully_shard_model(model) == ["trunk.blocks.0.attn.pos.weight"]  # T5's shared table
    model.to_empty(device="cpu")
    values = dict(reference.named_parameters())
    with torch.no_grad():
        for name, param in model.named_parameters():
            whole = values[name].detach()
            if isinstance(param, DTensor):
                whole = distribute_tensor(whole, param.device_mesh, param.placements)
            param.copy_(whole)
    return model


def check_replicated_start_equal(rank: int) -> None:
    """After to_empty, each rank's reset_parameters draws its own T5 table (the ranks' random
    streams differ); the first forward gives every rank the first rank's."""
    torch.manual_seed(rank)
    with torch.device("meta"):
        model = DecoderLM(ModelConfig(vocab_size=VOCAB, dim=32, depth=2, num_heads=4, pos="t5"))
    (name,) = fully_shard_model(model)
    model.to_empty(device="cpu")
    model.reset_parameters()
    model(torch.zeros(1, 4, dtype=torch.long))
    table = model.get_parameter(name).detach()
    first = table.clone()
    dist.broadcast(first, src=0)
    assert_close(table, first, rtol=0, atol=0)


def fsdp_rank(rank: int, world_size: int) -> None:
    torch.set_num_threads(1)
    check_replicated_start_equal(rank)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    rows = slice(rank * BATCH // world_size, (rank + 1) * BATCH // world_size)
    for pos in ENCODINGS:
        reference = make_model(pos)
        sharded = shard_on_meta(reference) if pos == "t5" else make_model(pos)
        if pos == "shaw":
            assert fully_shard_model(sharded) == []  # every layer's tables are its own
        for _ in range(2):  # the second step runs on the parameters SGD updated
            expected = lm_loss(reference, tokens)
            expected.backward()
            loss = lm_loss(sharded, tokens[rows])
            loss.backward()
            total = loss.detach().clone()
            dist.all_reduce(total)
            mean = total / world_size
            assert_close(mean, expected.detach(), msg=lambda m, p=pos: f"{p} loss: {m}")
            named = dict(sharded.named_parameters())
            for name, param in reference.named_parameters():
                grad = named[name].grad
                assert grad is not None and param.grad is not None
                whole = grad.full_tensor() if isinstance(grad, DTensor) else grad
                assert_close(whole, param.grad, msg=lambda m, n=name, p=pos: f"{p} {n}: {m}")
            for model in (reference, sharded):
                with torch.no_grad():
                    for param in model.parameters():
                        assert param.grad is not None
                        param -= 0.5 * param.grad
                        param.grad = None


def test_fsdp2_two_ranks_equal_one_rank() -> None:
    spawn(fsdp_rank, 2)


def test_fully_shard_model_needs_a_process_group() -> None:
    with pytest.raises(ValueError, match="not initialized"):
        fully_shard_model(make_model("rope"))

"""The lab's data: one module per data source or task generator, the "on what" of the
experiments (:mod:`posenc.lab.experiments`).

* :mod:`~posenc.lab.data.corpus`: the byte-level text corpus (the Python standard library's
  sources by default, or any text files), its train / validation / test split by file, and
  :class:`~posenc.lab.data.corpus.LMSource` batches for language modelling;
* :mod:`~posenc.lab.data.task_generators` and :mod:`~posenc.lab.data.tasks`: the seeded
  synthetic tasks (copy, reverse, sort, binary addition, passkey, flip-flop, selective
  copy, counting) and the batches and exact-match accuracy made from every task;
* :mod:`~posenc.lab.data.recall`: multi-query associative recall (MQAR, zoology's protocol);
* :mod:`~posenc.lab.data.ruler`: RULER's synthetic families (needles, variable tracking,
  common and frequent words) at the lab's scale;
* :mod:`~posenc.lab.data.state_tracking`: permutation word problems (S5, A5, S3, parity);
* :mod:`~posenc.lab.data.passkey`: passkey retrieval on the byte-level corpus, its scoring
  and the passkey mix a base trains on;
* :mod:`~posenc.lab.data.digits`: sklearn's 8×8 handwritten digits for the ViT experiments;
* :mod:`~posenc.lab.data.moving_digits`: those digits moving (bouncing) over a canvas,
  videos labelled digit × direction, and their tubelet tokens with (t, h, w) positions;
* :mod:`~posenc.lab.data.audio`: synthetic keyword spotting, tone and chirp words in noise
  as log-magnitude spectrograms, viewed as 1D frames or 2D time × frequency patches;
* :mod:`~posenc.lab.data.graphs`: the CSL graphs (circular skip links) with Benchmarking
  GNNs' folds, and random 3-regular graphs labelled with their triangle counts;
* :mod:`~posenc.lab.data.temporal`: timed edge streams: uploader → package events of the
  Debian changelogs on the machine, and a synthetic stream of drifting communities;
* :mod:`~posenc.lab.data.scenes`: rendered grid scenes with an instruction naming an object
  and the action chunk reaching it (a small VLA task), and the position ids of its token
  layout under each numbering (flat, Qwen2-VL M-RoPE, max + 1, a separate action axis).

Every sequence source yields :class:`~posenc.lab.batch.Batch` rows that are a pure function
of ``(seed, step)``; the graph sources are whole datasets, a pure function of their
seed. The names most experiments use are re-exported by :mod:`posenc.lab`.
"""

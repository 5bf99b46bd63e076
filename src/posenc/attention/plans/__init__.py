"""Fast paths of attention, each chosen by the kind an encoding declares (docs/architecture.md)."""

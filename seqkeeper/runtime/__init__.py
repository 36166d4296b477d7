"""The runtime: one object per worker that owns the processing and commit
protocol (:mod:`.task`), the protocol a topology implements (:mod:`.protocol`),
and the Faust app that drives them (:mod:`.wiring`)."""

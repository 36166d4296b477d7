"""Storage: codecs, the per-key stores over Faust tables on RocksDB, and the
Faust/Kafka glue that keeps recovery correct on every broker."""

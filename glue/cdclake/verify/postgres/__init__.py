"""PostgreSQL as a source of ``cdclake verify``: its checksums' SQL and its ``SourceDialect``."""

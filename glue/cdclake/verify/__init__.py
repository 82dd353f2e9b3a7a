"""``cdclake verify``: silver compared with its source database, whatever the engine.

- ``checksum``: the key ranges' checksums (the canonical text's kinds, the range plan, Spark's side);
  ``checksum_sql``: the checksums' queries built from a source engine's ``ChecksumSql``;
- ``dialect``: ``SourceDialect``, what a source engine brings; one package per engine (``postgres``, ``mysql``,
  ``sqlserver``: its ``checksums`` SQL and its ``dialect``), picked by ``dialects`` from a URL or an address;
- ``rows``: rows as compared value by value (canonical text, digests, the per-row comparison; pure);
- ``compare``: one table compared (checksums first, then the differing ranges row by row);
- ``result``: ``TableComparison``; ``report``: its text, JSON and CSV;
- ``live`` (the rule) and ``applied`` (where silver is): verify against a live source; ``run``: every table;
- ``job`` (the Glue verify job's reach to the source) and ``log`` (its ``cdclake_verify`` rows and metrics).
"""

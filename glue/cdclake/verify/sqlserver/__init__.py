"""SQL Server as a source of ``cdclake verify``."""

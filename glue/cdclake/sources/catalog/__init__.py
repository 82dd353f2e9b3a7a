"""A source database's catalog as the table configuration needs it: tables, columns in the order
DMS writes them, the Spark type DMS's output reads as, and the key (``cdclake init``)."""

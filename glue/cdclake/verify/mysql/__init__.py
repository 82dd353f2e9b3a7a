"""MariaDB and MySQL as a source of ``cdclake verify``."""

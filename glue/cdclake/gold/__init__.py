"""Layer 3: gold data marts kept fresh from silver, and change history (SCD type 2) of silver tables.

``settings`` (the ``gold:`` / ``marts:`` configuration) and ``sql`` (table references in a mart's SQL)
are pure; ``refresh``, ``history``, ``status`` and ``demo`` are the Spark edges.
"""

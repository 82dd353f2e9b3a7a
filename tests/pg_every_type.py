"""A PostgreSQL table with one column of each type that has no plain Spark counterpart, and edge
values for each: its rows at creation, and the same kinds of values again as CDC changes (swapped
between rows, and a new row with others). Shared by the type test and the database-size scenario."""

from __future__ import annotations

MOOD = """CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'it''s "great", really');"""

_TABLE = """
CREATE TABLE {table} (
    id int PRIMARY KEY, amount money, big numeric, day date, local_at timestamp, placed_at timestamptz,
    ip inet, net cidr, tags text[], nums int[], feeling public.mood, period tsrange, span int4range, gap interval);
INSERT INTO {table} VALUES
 (1, '1.25', 1234567890123456789012345.000000000000000000001, 'infinity', 'infinity', '-infinity',
  '2001:db8::1', '2001:db8::/32', ARRAY['a', NULL, 'say "hi"', 'x,y', ''], '{{1,NULL,3}}',
  'it''s "great", really', '[2024-01-01 00:00,2024-02-01 00:00)', '[1,10)', '1 year 2 mons 3 days 04:05:06.789012'),
 (2, '-92233720368547758.08', -0.0000000000000000000000001, '-infinity', '-infinity', 'infinity',
  '192.168.0.1', '10.0.0.0/8', '{{}}', '{{}}', 'sad', 'empty', '(,5]', '-1 mons -2 days +00:00:00.000001'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
"""

ROWS = 3  # rows of the table at creation
_CHANGES = (
    "UPDATE {table} SET amount = '92233720368547758.07', big = 'NaN', day = '-infinity', local_at = '-infinity', "
    "placed_at = 'infinity', ip = '::ffff:10.1.2.3/120', net = '2001:db8:abcd::/48', "
    "tags = ARRAY['\"quoted\"', 'back\\slash', 'brace}}'], "
    "nums = NULL, feeling = 'ok', period = '(,2024-01-01 12:00:00.5]', span = 'empty', gap = '-178000000 years' "
    "WHERE id = 1",
    "UPDATE {table} SET amount = '0', big = -99999999999999999999999999.99, day = 'infinity', local_at = 'infinity', "
    "placed_at = '-infinity', tags = ARRAY[NULL]::text[], gap = '0' WHERE id = 2",
    "UPDATE {table} SET amount = '-0.01', big = 0, day = '2024-02-29', local_at = '2024-02-29 23:59:59.999999', "
    "placed_at = '2024-02-29 23:59:59.5+02', ip = '::1', net = '::/0', tags = '{{}}', nums = '{{{{1,2}},{{3,4}}}}', "
    "feeling = 'it''s \"great\", really', period = '[,)', span = '[-5,)', gap = '1 mon -1 days' WHERE id = 3",
    "INSERT INTO {table} VALUES (4, '$1,000,000.5', 1e30, 'infinity', 'infinity', 'infinity', '0.0.0.0/0', "
    "'0.0.0.0/0', ARRAY['', NULL], '{{-2147483648}}', 'ok', '[2024-01-01,2024-01-01]', '[0,0]', '00:00:00.000001')",
)


def create(table: str) -> str:
    """The table (``schema.name``) and its rows; the ``mood`` type must exist (``MOOD``)."""
    return _TABLE.format(table=table)


def changes(table: str) -> tuple[str, ...]:
    """Three updates and an insert, each its own statement."""
    return tuple(change.format(table=table) for change in _CHANGES)

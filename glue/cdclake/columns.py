"""The bookkeeping column names every stage shares, and the suffixes of the bookkeeping tables beside
a silver table (no logic, no imports).

Bookkeeping columns all start with ``_cdc_`` and, except ``_cdc_order``, never reach silver.
"""

from __future__ import annotations

# Added by the bronze reader.
FILE_INDEX = "_cdc_file"  # the row's file: its index in the batch's apply order
FILE_BLOCK = "_cdc_block"  # the byte offset where the row's split of its file starts (0: read whole)
ROW_POSITION = "_cdc_row"  # the row's 0-based index among its file's records (the header not counted)
CORRUPT_RECORD = "_cdc_corrupt"  # the raw text of a CSV record Spark could not split, else NULL

# Added when raw rows become typed changes.
OP = "_cdc_op"
COMMIT_TS = "_cdc_ts"
CHANGE_SEQ = "_cdc_seq"
RAW_LINE = "_cdc_raw_line"  # the text of a CSV record Spark could not split into the expected fields
ERROR = "_cdc_errors"  # array<string>: why the row cannot be applied (NULL entries mean no problem)
INVALID = "_cdc_invalid"  # boolean: whether any entry of the error array is set, without building it
ORDER_COLUMNS = (COMMIT_TS, CHANGE_SEQ, FILE_INDEX, FILE_BLOCK, ROW_POSITION)
UNCHANGED_PREFIX = "_cdc_unchanged_"  # + column: the change did not capture this column (CsvNoSupValue)
# Beside a classified change: where the key's stored row lives at the batch's base snapshot, its
# data file and position (Iceberg's ``_file`` and ``_pos``); NULL when the key has no stored row.
STORED_FILE, STORED_POS = "_cdc_stored_file", "_cdc_stored_pos"
BOOKKEEPING = (OP, *ORDER_COLUMNS, ERROR, INVALID, RAW_LINE, STORED_FILE, STORED_POS)

# Kept on every silver row and tombstone: the order of the change that produced it, as one
# comparable text (commit time, change sequence, file position), so later batches can tell
# whether an incoming change is newer. Readers may ignore this documented column.
SILVER_ORDER = "_cdc_order"
# History's ``_cdc_order`` is silver's, then this, then the change's row index in its file (20
# digits). The zeros once held where the row's split of its file started.
HISTORY_PLACE_PREFIX = "#" + "0" * 20
# A history version's validity and operation (``lake.history``).
VALID_FROM, VALID_TO, IS_CURRENT, OPERATION = "valid_from", "valid_to", "is_current", "operation"
TOMBSTONE_DELETED_AT = "deleted_at"  # the delete's source commit time, for tombstone retention
# Append-only tables keep every change row, with its operation in this column.
APPEND_ONLY_OP_COLUMN = "cdc_operation"

# What applying a change does, decided against the stored row and the tombstones.
EFFECT = "_cdc_effect"
EFFECT_INSERT, EFFECT_UPDATE, EFFECT_DELETE = "insert", "update", "delete"
EFFECT_DELETE_MISSING, EFFECT_LATE = "delete-missing", "late"
EFFECTS = (EFFECT_INSERT, EFFECT_UPDATE, EFFECT_DELETE, EFFECT_DELETE_MISSING, EFFECT_LATE)

# The bookkeeping tables beside a silver table ``t``: ``t__history`` (``history: true``) and
# ``t__tombstones`` (the deleted keys the late-change guard checks).
HISTORY_SUFFIX = "__history"
TOMBSTONE_SUFFIX = "__tombstones"

"""The store's schema revisions, one module each, applied in order by `optimizer.store.migrations`.

A revision writes out the tables and columns it makes, in its own `MetaData`, and is never edited
once shipped: stores in use were made by it as it was, and one made tomorrow must come out the
same. A change to `optimizer/store/schema.py` ships with a new revision that makes it
(`tests/optimizer/store/test_migrations.py` fails until the migrated schema equals `schema.py`).
A revision that needs a foreign key to an earlier revision's table declares that table's key
column again in its own `MetaData`, as a stub, so its DDL does not depend on anything outside the
module.
"""

NAMES = ("0001_initial", "0002_loop", "0003_judge_calibrations", "0004_ledger_nightly", "0005_run_owners")
"""The revisions in the order they apply; revision `NAME` is the module `r<NAME>`. Here, apart from
the migration code, so a reader can learn the current schema version without importing SQLAlchemy."""

# Statement fences for SQLAlchemy (1.4 and 2.0): every statement run while a
# lease is current carries that lease's fence in a sqlcommenter comment,
# which fenceproxy reads and removes. A pooled engine can then serve several
# jobs at once, each write fenced by its own job's lease, whichever pooled
# connection runs it. Tested through the proxy with SQLAlchemy 1.4 and
# PyMySQL by integration/stmtfence_python_test.go.
#
#   engine = create_engine("mysql+pymysql://app:secret@fenceproxy:6033/app")
#   install_fence(engine)
#   with fenced(Fence("invoice:acme", owner, token)), engine.begin() as conn:
#       conn.execute(text("UPDATE invoices SET paid = 1 WHERE id = :id"), {"id": 7})
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple
from urllib.parse import quote

from sqlalchemy import event


class Fence(NamedTuple):
    lease: str    # the lease name
    owner: bytes  # the owner token (any bytes)
    token: int    # the fence token


# The fence of the code running now, per thread (a new thread starts with
# none: set it in the thread that runs the job).
current_fence = ContextVar("current_fence", default=None)


def fence_comment(f):
    # quote() keeps A-Z a-z 0-9 - . _ ~ and percent-encodes every other byte.
    return "/*fence_lease='%s',fence_owner='%s',fence_token='%d'*/ " % (
        quote(f.lease.encode("utf-8"), safe=""), quote(f.owner, safe=""), f.token)


@contextmanager
def fenced(f):
    """Run the block's statements under fence f."""
    reset = current_fence.set(f)
    try:
        yield
    finally:
        current_fence.reset(reset)


def _add_fence(conn, cursor, statement, parameters, context, executemany):
    f = current_fence.get()
    if f is None:
        return statement, parameters
    comment = fence_comment(f)
    # Drivers with %s or %(name)s parameters (PyMySQL, mysqlclient) apply
    # Python's % to the statement whenever SQLAlchemy passes parameters,
    # even empty ones: the comment's %XX must then be written %%XX. Only a
    # statement run with no_parameters=True and none given goes as it is.
    if conn.dialect.paramstyle in ("format", "pyformat") and (
            parameters or context is None or not context.no_parameters):
        comment = comment.replace("%", "%%")
    # At the start: a comment appended after a trailing "-- ..." would be
    # part of it.
    return comment + statement, parameters


def install_fence(engine):
    event.listen(engine, "before_cursor_execute", _add_fence, retval=True)

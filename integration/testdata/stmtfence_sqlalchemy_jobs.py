# Jobs on one pooled SQLAlchemy engine through fenceproxy, fenced per
# statement by docs/examples/fence_comment_sqlalchemy.py; run by
# TestSQLAlchemyStatementFence (integration/stmtfence_python_test.go).
#
# Usage: python3 stmtfence_sqlalchemy_jobs.py EXAMPLES_DIR host port user password database
# Stdin: {"session": LEASE, "jobs": {"a": LEASE, ...}, "orm_row": ID},
# LEASE = {"name", "owner_hex", "token"}, ID an invoices row every job changes.
# Every pooled connection's session first gets the "session" fence; then each
# job runs in two threads, each thread under its job's lease, through every
# execution path that sends a statement (text with parameters, without,
# exec_driver_sql, no_parameters, executemany), then through the ORM's unit
# of work. Stdout: per job the statements run, the rows they changed, the
# statements that changed none, any errors and the ORM steps' outcomes; the
# pool's sessions' owners (hex) at the end.
import json
import sys
import threading

from sqlalchemy import Column, Integer, Numeric, String, create_engine, text
from sqlalchemy.orm import Session, declarative_base

sys.path.insert(0, sys.argv[1])
from fence_comment_sqlalchemy import Fence, fenced, install_fence  # noqa: E402

host, port, user, password, database = sys.argv[2:7]
spec = json.load(sys.stdin)
POOL = 2


Base = declarative_base()


class Invoice(Base):
    __tablename__ = "invoices"
    id = Column(Integer, primary_key=True)
    customer = Column(String(40), nullable=False)
    period = Column(String(7), nullable=False)
    amount = Column(Numeric(10, 2), nullable=False)


def fence(d):
    return Fence(d["name"], bytes.fromhex(d["owner_hex"]), int(d["token"]))


engine = create_engine(
    "mysql+pymysql://%s:%s@%s:%s/%s" % (user, password, host, port, database),
    pool_size=POOL, max_overflow=0)
install_fence(engine)

# Every pooled connection holds the session fence: a statement whose comment
# were lost would run under it.
s = fence(spec["session"])
held = [engine.connect() for _ in range(POOL)]
for c in held:
    c.exec_driver_sql("SET @fence_lease = %s, @fence_owner = %s, @fence_token = %s", (s.lease, s.owner, s.token))
for c in held:
    c.close()

results = {}
lock = threading.Lock()


def job(name, f, g):
    out = {"statements": 0, "rows": 0, "zero": 0, "errors": [], "orm": []}

    def count(r):
        out["statements"] += 1
        out["rows"] += r.rowcount
        if r.rowcount == 0:
            out["zero"] += 1

    with fenced(f):
        for i in range(4):
            cust = "%s-%d-%d" % (name, g, i)
            try:
                with engine.begin() as conn:
                    count(conn.execute(
                        text("INSERT INTO invoices (customer, period, amount) VALUES (:c, '2026-01', 1)"), {"c": cust}))
                    count(conn.execute(text("UPDATE invoices SET amount = amount + 1 WHERE customer = '%s'" % cust)))
                with engine.begin() as conn:
                    count(conn.exec_driver_sql(
                        "UPDATE invoices SET amount = amount + 1 WHERE customer LIKE %s", (cust + "%",)))
                    count(conn.exec_driver_sql("UPDATE invoices SET amount = amount + 1 WHERE customer = '%s'" % cust))
                with engine.begin() as conn:
                    count(conn.execution_options(no_parameters=True).exec_driver_sql(
                        "UPDATE invoices SET amount = amount + 1 WHERE customer = '%s'" % cust))
                with engine.begin() as conn:
                    count(conn.execute(
                        text("INSERT INTO invoices (customer, period, amount) VALUES (:c, '2026-02', 5)"),
                        [{"c": cust}, {"c": cust + "m"}]))
            except Exception as e:  # reported, not raised: the test names it
                out["errors"].append("%s: %s" % (type(e).__name__, e))
        # The ORM's unit of work: an object added, then changed; and a
        # change to an existing row (spec["orm_row"], customer "orm").
        for step in ("insert", "update", "update existing"):
            try:
                with Session(engine) as s:
                    if step == "insert":
                        obj = Invoice(customer="%s-%d-orm" % (name, g), period="2026-03", amount=1)
                        s.add(obj)
                    elif step == "update":
                        obj = s.query(Invoice).filter_by(customer="%s-%d-orm" % (name, g)).one()
                        obj.amount = 5
                    else:
                        obj = s.get(Invoice, spec["orm_row"])
                        obj.amount = ord(name[0])  # a: 97, b: 98, ...: whose change stayed
                    s.flush()
                    oid = obj.id  # before the commit expires it
                    s.commit()
                out["orm"].append("%s: ok%s" % (step, " (id 0)" if oid == 0 else ""))
            except Exception as e:
                out["orm"].append("%s: %s" % (step, type(e).__name__))
    with lock:
        r = results.setdefault(name, {"statements": 0, "rows": 0, "zero": 0, "errors": [], "orm": []})
        for k in ("statements", "rows", "zero"):
            r[k] += out[k]
        r["errors"] += out["errors"]
        r["orm"] += out["orm"]


threads = [threading.Thread(target=job, args=(name, fence(d), g))
           for name, d in sorted(spec["jobs"].items()) for g in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()

held = [engine.connect() for _ in range(POOL)]
sessions = [c.exec_driver_sql("SELECT HEX(@fence_owner)").scalar() for c in held]
for c in held:
    c.close()
engine.dispose()
print(json.dumps({"jobs": results, "sessions": sessions}, sort_keys=True))

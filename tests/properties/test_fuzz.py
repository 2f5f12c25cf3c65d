"""Fuzzing every function's arguments: random types, NULLs, huge values, malformed JSON.

Every call either succeeds or raises a documented error: a pg_jobs refusal (class PJ), a bad
argument (22023, 22004), or an error PostgreSQL raises before pg_jobs runs (no function for
those argument types, a literal of the wrong form, a value out of its type's range). Never an
internal error (XX000), never a lost server. A refused call changes nothing: a digest of every
table is the same before and after it.
"""

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SIGNATURES = {
    "enqueue": ["text", "jsonb", "text", "timestamptz", "int", "int", "text", "text", "text", "text", "uuid", "uuid"],
    "enqueue_batch": ["jsonb"], "claim": ["text", "text[]", "int", "interval"],
    "heartbeat": ["uuid", "bigint", "interval"], "complete": ["uuid", "bigint", "jsonb"],
    "complete_many": ["uuid[]", "bigint[]", "jsonb[]"],
    "fail": ["uuid", "bigint", "text", "timestamptz", "boolean"], "snooze": ["uuid", "bigint", "timestamptz"],
    "assert_claim": ["uuid", "bigint"], "save_step": ["uuid", "bigint", "text", "jsonb"],
    "get_step": ["uuid", "text"], "start_step": ["uuid", "bigint", "text"],
    "fail_step": ["uuid", "bigint", "text", "text"], "get_steps": ["uuid"],
    "publish": ["text", "jsonb", "text", "interval"],
    "await_event": ["uuid", "bigint", "text", "text", "interval"], "cancel": ["uuid"],
    "requeue": ["uuid", "text"], "promote": ["uuid"], "get_job": ["uuid"], "get_jobs": ["uuid[]"],
    "pause_queue": ["text"], "resume_queue": ["text"],
    "sweep": ["int"], "grant_producer": ["name"], "grant_worker": ["name"], "grant_admin": ["name"],
    "grant_monitor": ["name"],
}
# Class 22 (data exceptions: 22023, 22004 and the input errors of PostgreSQL's types), class
# PJ (refusals), and the errors of resolving a call: no such function (42883), ambiguous
# (42725), a datatype mismatch (42804), an undefined object such as an unknown role (42704).
ALLOWED_CLASSES = ("22", "PJ")
ALLOWED_CODES = {"42883", "42725", "42804", "42704", "40001"}

TEXTS = st.one_of(
    st.none(), st.just(""), st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30),
    st.just("x" * 10_000), st.just("default"),
    st.just("'; drop table jobs.jobs; --"), st.just("\\u0000"),
)
JSONS = st.sampled_from(["{", "[1,", '"x"', "null", "[]", "{}", '[{"name": "x"}]', '[{"name": null}]',
                         '[{"name": "x", "run_at": "not a time"}]', '{"a": ' * 50 + "1" + "}" * 50])
TIMES = st.sampled_from(["infinity", "-infinity", "294277-01-01", "2000-01-01", "now", "yesterday", "x"])
INTERVALS = st.sampled_from(["-1 second", "0", "1 ms", "1 hour", "100 years", "178000000 years", "x"])
INTS = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.sampled_from([0, -1, 1, 1001, 2**31]))
UUIDS = st.sampled_from(["00000000-0000-0000-0000-000000000000", "not-a-uuid", "ffffffff-ffff-ffff-ffff-ffffffffffff"])
ARRAYS = st.sampled_from(["{}", "{NULL}", "{default,NULL}", "{" + ",".join(["q"] * 200) + "}", "{1,2}"])

ARG = st.one_of(TEXTS, INTS, JSONS, TIMES, INTERVALS, UUIDS, ARRAYS, st.booleans(), st.floats(allow_nan=True))


def typed(pg_type, seed_id, seed_claim):
    """Values for a parameter of pg_type, as text cast in the call: mostly well-formed, some
    not; the seed job's own id and claim token among them, so the fenced paths run too."""
    by_type = {
        "text": TEXTS, "name": TEXTS, "jsonb": st.one_of(st.none(), JSONS),
        "timestamptz": st.one_of(st.none(), TIMES), "interval": st.one_of(st.none(), INTERVALS),
        "int": INTS.map(lambda v: None if v is None else str(v)),
        "bigint": st.one_of(INTS.map(lambda v: None if v is None else str(v)), st.just(str(seed_claim))),
        "uuid": st.one_of(st.none(), UUIDS, st.just(seed_id)),
        "boolean": st.sampled_from([None, "true", "false", "maybe"]),
        "text[]": st.one_of(st.none(), ARRAYS), "uuid[]": st.sampled_from([None, "{}", "{" + seed_id + "}", "{x}"]),
        "bigint[]": st.sampled_from([None, "{}", "{" + str(seed_claim) + "}", "{1,2}", "{NULL}"]),
        "jsonb[]": st.sampled_from([None, "{}", '{"{}"}', '{"{"}']),
    }
    return by_type[pg_type]

def digest(conn):
    return conn.execute(
        """select md5(coalesce((select string_agg(t::text, '|' order by t::text) from jobs.jobs t), ''))
                  || md5(coalesce((select string_agg(t::text, '|' order by t::text) from jobs.steps t), ''))
                  || md5(coalesce((select string_agg(t::text, '|' order by t::text) from jobs.events t), ''))
                  || md5(coalesce((select string_agg(t::text, '|' order by t::text) from jobs.queues t), ''))"""
    ).fetchone()[0]


def test_every_function_refuses_bad_arguments_with_documented_errors_and_changes_nothing(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('seed')")
        seed_id, seed_claim = conn.execute("select id::text, claim from jobs.claim('w')").fetchone()
        seen = {}

        @settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
        @given(name=st.sampled_from(sorted(SIGNATURES)), data=st.data())
        def call(name, data):
            types = SIGNATURES[name]
            nargs = data.draw(st.integers(0, len(types)))
            if data.draw(st.integers(0, 9)) == 0:  # now and then, values of any type at all
                args, casts = [data.draw(ARG) for _ in range(nargs)], ["%s"] * nargs
            else:
                args = [data.draw(typed(t, seed_id, seed_claim)) for t in types[:nargs]]
                casts = [f"%s::{t}" for t in types[:nargs]]
            before = digest(conn)
            sql = f"select jobs.{name}({', '.join(casts)})"
            try:
                conn.execute(sql, args)
                seen["ok"] = seen.get("ok", 0) + 1
            except psycopg.errors.InternalError_ as exc:  # XX000
                raise AssertionError(f"internal error from {sql} {args!r}: {exc}") from exc
            except psycopg.OperationalError as exc:
                raise AssertionError(f"the server went away on {sql} {args!r}: {exc}") from exc
            except psycopg.Error as exc:
                code = exc.sqlstate
                seen[code] = seen.get(code, 0) + 1
                assert code[:2] in ALLOWED_CLASSES or code in ALLOWED_CODES, (code, sql, args, str(exc))
                assert digest(conn) == before, f"a refused call changed something: {sql} {args!r}"

        call()
        print(f"\nfuzz outcomes by SQLSTATE: {dict(sorted(seen.items()))}")
        assert conn.execute("select 1").fetchone()[0] == 1

"""Model-based randomized test: hypothesis drives random sequences of enqueue, claim,
heartbeat, complete, fail, snooze, cancel, requeue, sweep and the passing of time against the
extension and against a small in-memory model of the contract, and compares every answer and
every job's state, attempt and claim token (kept, or grown, as the model says) after every step.

Time is moved, not slept: pg_jobs.clock_offset shifts jobs.clock(). Leases, backoffs and
snoozes are an hour and time moves in steps of two hours, so the seconds the test itself takes
never land near a deadline. With at most 8 jobs and claims of 10, a claim takes every claimable
job, so the model needs no claim order.
"""

from dataclasses import dataclass, field

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

HOUR = 3600
LIVE = {"ready", "delayed", "running", "suspended"}
FINISHED = {"completed", "failed", "dead", "cancelled"}


@dataclass
class Job:
    id: str
    max_attempts: int
    key: str | None
    state: str = "ready"
    attempt: int = 0
    claim: int = 0  # how many times its token moved
    token: int = 0  # the token itself, with its random low bits
    lease_expires: float | None = None  # model seconds
    run_at: float = 0.0
    finished_at: float | None = None
    tokens: list = field(default_factory=list)  # every token ever handed out


class Model:
    def __init__(self):
        self.now = 0.0
        self.jobs: dict[str, Job] = {}

    def held(self, job, token):
        return job.state == "running" and job.token == token and job.lease_expires > self.now

    def claimable(self, job):
        return (job.state == "ready"
                or (job.state in ("delayed", "suspended") and job.run_at <= self.now)
                or (job.state == "running" and job.lease_expires <= self.now))

    def lapse_buries(self, job):
        return job.state == "running" and job.lease_expires <= self.now and job.attempt >= job.max_attempts

    def bury(self, job):
        job.state, job.lease_expires, job.finished_at = "dead", None, self.now


class JobsMachine(RuleBasedStateMachine):
    def __init__(self, dsn):
        super().__init__()
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.model = Model()
        self.observed = {}  # job id -> (its token in the table, the model's moves then)

    @initialize()
    def reset(self):
        self.conn.execute("truncate jobs_data.jobs, jobs_data.job_types, jobs_data.steps, jobs_data.events")
        # The settles' share of retention runs at random(): the same one for every replay.
        self.conn.execute("select setseed(0.5)")
        self.conn.execute("""insert into jobs.job_types (name, backoff, backoff_base, jitter, lease)
                             values ('m', 'fixed', '1 hour', 0, '1 hour')""")
        self.set_time(0)

    def set_time(self, seconds):
        self.model.now = seconds
        self.conn.execute(f"set pg_jobs.clock_offset = '{int(seconds)}s'")

    def one(self, sql, args=()):
        return self.conn.execute(sql, args).fetchone()[0]

    def code_of(self, sql, args=()):
        try:
            self.conn.execute(sql, args)
            return None
        except psycopg.Error as exc:
            return exc.sqlstate

    # --------------------------------------------------------------- rules

    @precondition(lambda self: len(self.model.jobs) < 8)
    @rule(max_attempts=st.integers(1, 3), key=st.sampled_from([None, "a", "b"]))
    def enqueue(self, max_attempts, key):
        job_id, deduped = self.conn.execute(
            "select id::text, deduped from jobs.enqueue('m', max_attempts => %s, idempotency_key => %s)",
            (max_attempts, key)).fetchone()
        holder = next((j for j in self.model.jobs.values() if key and j.key == key and j.state in LIVE), None)
        if holder:
            assert deduped and job_id == holder.id
        else:
            assert not deduped and job_id not in self.model.jobs
            self.model.jobs[job_id] = Job(job_id, max_attempts, key, run_at=self.model.now)

    @rule()
    def claim(self):
        rows = self.conn.execute("select id::text, attempt, claim from jobs.claim('w', max_jobs => 10)").fetchall()
        got = {r[0]: r[1] for r in rows}
        tokens = {r[0]: r[2] for r in rows}
        expect = {}
        for job in self.model.jobs.values():
            if self.model.lapse_buries(job):
                self.model.bury(job)
            elif self.model.claimable(job):
                job.state, job.attempt, job.claim = "running", job.attempt + 1, job.claim + 1
                job.lease_expires, job.finished_at = self.model.now + HOUR, None
                expect[job.id] = job.attempt
        assert got == expect
        for job_id, token in tokens.items():
            self.model.jobs[job_id].token = token
            self.model.jobs[job_id].tokens.append(token)

    def pick(self, data):
        # By creation order (dicts keep it), never by id: ids are random, draws must not be.
        job = data.draw(st.sampled_from(list(self.model.jobs.values())))
        token = data.draw(st.sampled_from(job.tokens)) if job.tokens else 0
        return job, token

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def heartbeat(self, data):
        job, token = self.pick(data)
        extended = self.one("select jobs.heartbeat(%s, %s) is not null", (job.id, token))
        assert extended == self.model.held(job, token)
        if extended:
            job.lease_expires = self.model.now + HOUR

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def complete(self, data):
        job, token = self.pick(data)
        landed = self.one("select jobs.complete(%s, %s)", (job.id, token))
        assert landed == self.model.held(job, token)
        if landed:
            job.state, job.lease_expires, job.finished_at = "completed", None, self.model.now
            self.forget_pruned()

    def forget_pruned(self):
        """One completing settle in 8 also deletes completed and cancelled jobs past retention
        (the settles' share of retention, at random): the model lets those go when the
        database has."""
        present = {r[0] for r in self.conn.execute("select id::text from jobs.jobs")}
        for job in list(self.model.jobs.values()):
            if (job.id not in present and job.state in ("completed", "cancelled")
                    and job.finished_at < self.model.now - 7 * 24 * HOUR):
                del self.model.jobs[job.id]

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data(), retryable=st.booleans())
    def fail(self, data, retryable):
        job, token = self.pick(data)
        outcome = self.one("select jobs.fail(%s, %s, 'boom', retryable => %s)", (job.id, token, retryable))
        if not self.model.held(job, token):
            assert outcome is None
            return
        if retryable and job.attempt < job.max_attempts:
            assert outcome == "retried"
            job.state, job.run_at = "delayed", self.model.now + HOUR
        else:
            assert outcome == "dead"
            job.state, job.finished_at = "dead", self.model.now
        job.lease_expires = None

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def snooze(self, data):
        job, token = self.pick(data)
        parked = self.one("select jobs.snooze(%s, %s, jobs.clock() + interval '1 hour')", (job.id, token))
        assert parked == self.model.held(job, token)
        if parked:
            job.state, job.run_at, job.attempt, job.lease_expires = "suspended", self.model.now + HOUR, job.attempt - 1, None

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def cancel(self, data):
        job, _ = self.pick(data)
        code = self.code_of("select jobs.cancel(%s)", (job.id,))
        if job.state in LIVE:
            assert code is None
            job.state, job.claim, job.lease_expires, job.finished_at = "cancelled", job.claim + 1, None, self.model.now
            job.token = None
        else:
            assert code == "PJ005"

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def requeue(self, data):
        job, _ = self.pick(data)
        code = self.code_of("select jobs.requeue(%s)", (job.id,))
        key_taken = job.key and any(j.key == job.key and j.state in LIVE and j.id != job.id
                                    for j in self.model.jobs.values())
        if job.state in LIVE:
            assert code == "PJ004"
        elif key_taken:
            assert code == "PJ002"
        else:
            assert code is None
            job.state, job.attempt, job.claim, job.token = "ready", 0, job.claim + 1, None
            job.run_at, job.finished_at, job.lease_expires = self.model.now, None, None

    @rule()
    def sweep(self):
        self.conn.execute("select * from jobs.sweep()")
        for job in list(self.model.jobs.values()):
            if job.state == "running" and job.lease_expires <= self.model.now:
                if job.attempt >= job.max_attempts:
                    self.model.bury(job)
                else:
                    job.state, job.lease_expires = "ready", None
            retention = 7 * 24 * HOUR if job.state in ("completed", "cancelled") else 30 * 24 * HOUR
            if job.state in FINISHED and job.finished_at < self.model.now - retention:
                del self.model.jobs[job.id]

    @rule(hours=st.sampled_from([2, 2, 2, 200, 800]))
    def time_passes(self, hours):
        self.set_time(self.model.now + hours * HOUR)

    # --------------------------------------------------------------- the comparison

    @invariant()
    def every_job_matches_the_model(self):
        rows = {r[0]: (r[1], r[2], r[3]) for r in self.conn.execute(
            "select id::text, state::text, attempt, claim from jobs.jobs")}
        model = {j.id: (j.state, j.attempt) for j in self.model.jobs.values()}
        assert {job_id: row[:2] for job_id, row in rows.items()} == model
        # The token is opaque: it stays while the model says it did not move, and grows when
        # the model says it moved (claim, cancel, requeue).
        for job_id, (_, _, token) in rows.items():
            moves = self.model.jobs[job_id].claim
            seen = self.observed.get(job_id)
            if seen is not None:
                assert token == seen[0] if moves == seen[1] else token > seen[0]
            self.observed[job_id] = (token, moves)

    def teardown(self):
        self.conn.close()


def test_random_sequences_match_the_model(dsn):
    class Machine(JobsMachine):
        def __init__(self):
            super().__init__(dsn)

    Machine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                         suppress_health_check=list(HealthCheck))
    Machine.TestCase().runTest()

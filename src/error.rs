//! Every documented error of pg_jobs, in one place: its name, its SQLSTATE, and when it is
//! raised. The SQL functions raise these codes; `jobs.error_codes()` lists them for users and
//! the tests check that each function raises the code listed here.

use pgrx::prelude::*;

/// A documented error: a refusal (class `PJ`) or a bad argument (class 22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobError {
    LeaseLost,
    DuplicateJob,
    JobNotFound,
    NotRequeueable,
    NotCancellable,
    NotPromotable,
    /// A delete of a live job, of a child (deleted with its root), or of a family with a live job.
    NotDeletable,
    InvalidParameterValue,
    NullValueNotAllowed,
    /// An idempotency key taken and freed twice during one enqueue: retry the call.
    SerializationFailure,
    /// A role bound to tenants named another tenant (or none).
    TenantNotAllowed,
    /// A claim asked to wait in a transaction whose snapshot would never see new work.
    WaitNeedsReadCommitted,
    /// A role holding pg_jobs rights both through roles bound to tenants and through one bound
    /// to none.
    InsufficientPrivilege,
}

impl JobError {
    pub const ALL: [JobError; 13] = [
        JobError::LeaseLost,
        JobError::DuplicateJob,
        JobError::JobNotFound,
        JobError::NotRequeueable,
        JobError::NotCancellable,
        JobError::NotPromotable,
        JobError::NotDeletable,
        JobError::InvalidParameterValue,
        JobError::NullValueNotAllowed,
        JobError::SerializationFailure,
        JobError::TenantNotAllowed,
        JobError::WaitNeedsReadCommitted,
        JobError::InsufficientPrivilege,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            JobError::LeaseLost => "lease_lost",
            JobError::DuplicateJob => "duplicate_job",
            JobError::JobNotFound => "job_not_found",
            JobError::NotRequeueable => "not_requeueable",
            JobError::NotCancellable => "not_cancellable",
            JobError::NotPromotable => "not_promotable",
            JobError::NotDeletable => "not_deletable",
            JobError::InvalidParameterValue => "invalid_parameter_value",
            JobError::NullValueNotAllowed => "null_value_not_allowed",
            JobError::SerializationFailure => "serialization_failure",
            JobError::TenantNotAllowed => "tenant_not_allowed",
            JobError::WaitNeedsReadCommitted => "wait_needs_read_committed",
            JobError::InsufficientPrivilege => "insufficient_privilege",
        }
    }

    pub const fn sqlstate(self) -> &'static str {
        match self {
            JobError::LeaseLost => "PJ001",
            JobError::DuplicateJob => "PJ002",
            JobError::JobNotFound => "PJ003",
            JobError::NotRequeueable => "PJ004",
            JobError::NotCancellable => "PJ005",
            JobError::NotPromotable => "PJ006",
            JobError::NotDeletable => "PJ009",
            JobError::InvalidParameterValue => "22023",
            JobError::NullValueNotAllowed => "22004",
            JobError::SerializationFailure => "40001",
            JobError::TenantNotAllowed => "PJ007",
            JobError::WaitNeedsReadCommitted => "PJ008",
            JobError::InsufficientPrivilege => "42501",
        }
    }

    pub const fn meaning(self) -> &'static str {
        match self {
            JobError::LeaseLost => {
                "the claim is no longer held (lease lapsed, re-claimed or cancelled): roll back"
            }
            JobError::DuplicateJob => {
                "a live job of this name and tenant holds the idempotency key (on_conflict => 'error', or requeue)"
            }
            JobError::JobNotFound => "no job has this id",
            JobError::NotRequeueable => {
                "only failed, dead, cancelled and completed jobs can be requeued"
            }
            JobError::NotCancellable => {
                "only live jobs (ready, delayed, running, suspended) can be cancelled"
            }
            JobError::NotPromotable => "only delayed jobs can be promoted",
            JobError::NotDeletable => {
                "only a finished root job whose family is finished can be deleted (jobs.delete)"
            }
            JobError::InvalidParameterValue => {
                "a bad argument: empty, out of range, oversized or unknown"
            }
            JobError::NullValueNotAllowed => "NULL where a value is required",
            JobError::SerializationFailure => {
                "an idempotency key was taken and freed twice during one enqueue: retry the call"
            }
            JobError::TenantNotAllowed => {
                "the role is bound to other tenants (jobs.grant_producer / grant_worker with a tenant)"
            }
            JobError::WaitNeedsReadCommitted => {
                "claim with wait runs in READ COMMITTED: a REPEATABLE READ or SERIALIZABLE snapshot never sees new work"
            }
            JobError::InsufficientPrivilege => {
                "the role holds pg_jobs rights through roles bound to tenants and through one bound to none: bind the role itself"
            }
        }
    }
}

/// The documented error codes of pg_jobs.
#[pg_extern(immutable, parallel_safe)]
fn error_codes() -> TableIterator<
    'static,
    (
        name!(name, &'static str),
        name!(sqlstate, &'static str),
        name!(meaning, &'static str),
    ),
> {
    TableIterator::new(
        JobError::ALL
            .into_iter()
            .map(|e| (e.name(), e.sqlstate(), e.meaning())),
    )
}

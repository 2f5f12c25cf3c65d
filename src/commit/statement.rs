//! What the statement running is: whether it is one call of a pg_jobs function and nothing
//! else. Two things are safe only then, because no other part of the statement can read or
//! write anything after the call:
//! - a waiting claim gives up its snapshot's xmin while it sleeps (src/commit/wakeups.rs);
//! - a claim or a heartbeat in its own transaction commits without waiting for its WAL flush
//!   (src/commit/async_claims.rs).

use pgrx::prelude::*;
use pgrx::PgList;
use std::ffi::CStr;

/// Whether the statement running is one call of `jobs.<function>(...)` and nothing else:
/// `SELECT jobs.<function>(...)`, or `SELECT ... FROM jobs.<function>(...)` with, above the
/// function's scan, only aggregates, sorts, limits and projections (`count(*)`, `array_agg`,
/// `ORDER BY`, `LIMIT`). One plan that reads no table (no relation in its range table, no
/// subplan), in which the call's arguments call no volatile function (which could write) and
/// nothing computed after the call calls any but immutable ones (a stable one reads tables).
pub fn is_a_bare_call(function: &CStr) -> bool {
    unsafe {
        let portal = pg_sys::ActivePortal;
        if portal.is_null() {
            return false;
        }
        let stmts = PgList::<pg_sys::Node>::from_pg((*portal).stmts);
        let [stmt] = stmts.iter_ptr().collect::<Vec<_>>()[..] else {
            return false;
        };
        if (*stmt).type_ != pg_sys::NodeTag::T_PlannedStmt {
            return false;
        }
        let stmt = stmt as *mut pg_sys::PlannedStmt;
        (*stmt).commandType == pg_sys::CmdType::CMD_SELECT
            && (*stmt).relationOids.is_null()
            && (*stmt).subplans.is_null()
            && bare_plan((*stmt).planTree, function)
    }
}

/// A plan node of a bare call: the call at the bottom, and above it only nodes that compute
/// nothing volatile.
unsafe fn bare_plan(plan: *mut pg_sys::Plan, function: &CStr) -> bool {
    use pg_sys::NodeTag::*;
    unsafe {
        if plan.is_null()
            || !(*plan).initPlan.is_null()
            || !(*plan).righttree.is_null()
            || volatile((*plan).qual.cast())
        {
            return false;
        }
        let targets = (*plan).targetlist;
        match (*plan).type_ {
            // SELECT ... FROM jobs.f(...)
            T_FunctionScan => {
                let scan = plan as *mut pg_sys::FunctionScan;
                let functions = PgList::<pg_sys::RangeTblFunction>::from_pg((*scan).functions);
                let [call] = functions.iter_ptr().collect::<Vec<_>>()[..] else {
                    return false;
                };
                (*plan).lefttree.is_null()
                    && !volatile(targets.cast())
                    && is_call((*call).funcexpr, function)
            }
            // SELECT jobs.f(...)
            T_Result if (*plan).lefttree.is_null() => {
                let result = plan as *mut pg_sys::Result;
                let targets = PgList::<pg_sys::TargetEntry>::from_pg(targets);
                let [target] = targets.iter_ptr().collect::<Vec<_>>()[..] else {
                    return false;
                };
                !volatile((*result).resconstantqual) && is_call((*target).expr.cast(), function)
            }
            T_Result => {
                let result = plan as *mut pg_sys::Result;
                !volatile((*result).resconstantqual)
                    && !volatile(targets.cast())
                    && bare_plan((*plan).lefttree, function)
            }
            T_Limit => {
                let limit = plan as *mut pg_sys::Limit;
                !volatile((*limit).limitOffset)
                    && !volatile((*limit).limitCount)
                    && !volatile(targets.cast())
                    && bare_plan((*plan).lefttree, function)
            }
            T_Agg | T_Sort | T_IncrementalSort | T_Material => {
                !volatile(targets.cast()) && bare_plan((*plan).lefttree, function)
            }
            _ => false,
        }
    }
}

/// Whether `node` is a call of `jobs.<function>` whose arguments call no volatile function.
unsafe fn is_call(node: *mut pg_sys::Node, function: &CStr) -> bool {
    unsafe {
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_FuncExpr {
            return false;
        }
        let call = node as *mut pg_sys::FuncExpr;
        if changes((*call).args.cast()) {
            return false;
        }
        let funcid = (*call).funcid;
        if KNOWN.with(|k| {
            k.borrow()
                .iter()
                .any(|(oid, name)| *oid == funcid && name.as_c_str() == function)
        }) {
            return true;
        }
        let name = pg_sys::get_func_name(funcid);
        let schema = pg_sys::get_namespace_name(pg_sys::get_func_namespace(funcid));
        let is = !name.is_null()
            && !schema.is_null()
            && CStr::from_ptr(name) == function
            && CStr::from_ptr(schema) == c"jobs";
        if is {
            KNOWN.with(|k| k.borrow_mut().push((funcid, function.to_owned())));
        }
        is
    }
}

thread_local! {
    /// The functions of pg_jobs found by name so far, by oid: the name lookups (two catalog
    /// cache searches) cost a claim about 5% of its CPU. An oid of a dropped extension's function
    /// only stays here unused (oids are not handed out again for a long while).
    static KNOWN: std::cell::RefCell<Vec<(pg_sys::Oid, std::ffi::CString)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether an expression computed after the call (a target, a filter, a limit) calls anything
/// but immutable functions: a stable one reads tables with the statement's snapshot, after a
/// waiting claim gave up that snapshot's xmin (rows it should see may be vacuumed away).
unsafe fn volatile(node: *mut pg_sys::Node) -> bool {
    !node.is_null() && unsafe { pg_sys::contain_mutable_functions(node) }
}

/// Whether the call's arguments (computed before it, under the statement's snapshot) call a
/// volatile function, which could write.
unsafe fn changes(node: *mut pg_sys::Node) -> bool {
    !node.is_null() && unsafe { pg_sys::contain_volatile_functions(node) }
}

// Nothing a superuser runs calls code a less trusted role owns: whoever owns schema jobs or a
// function in it may replace that function with code of its own, which then runs with the
// rights of its caller. A worker started as a superuser looks up those owners before its first
// call into jobs and refuses when one is not a superuser (`trustOwner` overrides it).

/** The roles, not superusers, that own schema jobs or a function in it, when the session's
 * role is a superuser; NULL otherwise (every name qualified: a superuser's search_path is not
 * trusted either). */
export const UNTRUSTED_OWNERS = "select pg_catalog.string_agg(distinct o.rolname::text, ', ') as owners "
  + "from (select n.nspowner as owner from pg_catalog.pg_namespace as n where n.nspname = 'jobs' "
  + 'union select p.proowner from pg_catalog.pg_proc as p '
  + "join pg_catalog.pg_namespace as n on n.oid = p.pronamespace where n.nspname = 'jobs') as x "
  + 'join pg_catalog.pg_roles as o on o.oid = x.owner where not o.rolsuper '
  + 'and (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = current_user)';

/** The refusal for those owners. */
export function untrustedOwners(owners: string): Error {
  return new Error(`pg-jobs: refusing to call pg_jobs as a superuser: schema jobs or its functions belong to ${owners}, `
    + 'which is not a superuser and could replace them with code that would run with this session\'s rights. '
    + `Fix: connect as a role that is not a superuser (jobs.grant_worker), or pass trustOwner: true (--trust-owner) if ${owners} `
    + 'is trusted as a superuser is');
}

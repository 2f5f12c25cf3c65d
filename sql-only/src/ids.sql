-- The SQL-only edition's claim tokens and job ids: jobs._next_claim and jobs._uuid_v7 in
-- PL/pgSQL, with the signatures and guarantees of src/functions/tokens.rs and src/functions/ids.rs (which the
-- extension runs). tests/editions/test_sql_only_ids.py holds them to those guarantees.

-- The token after `previous`: in its high 40 bits the later of the milliseconds since
-- 2024-01-01 on the server's clock and the previous token's high bits plus one, in its low 23
-- bits random bits (from gen_random_uuid(), a strong random source in every PostgreSQL since
-- 13). Each token of a job is greater than every earlier one, one lost in a crash included,
-- and none can be derived from an earlier one (src/functions/tokens.rs says why).
create function jobs._next_claim(previous bigint)
returns bigint
language plpgsql volatile strict parallel safe
as $$
declare
  v_high bigint := greatest(
    greatest(floor(extract(epoch from clock_timestamp() - timestamptz '2024-01-01 00:00:00+00') * 1000), 0)::bigint,
    (greatest(previous, 0) >> 23) + 1);
begin
  if v_high > (1::bigint << 40) - 1 then
    raise exception 'pg_jobs: claim tokens ran out (their milliseconds end in 2058)' using errcode = 'XX000';
  end if;
  -- (the first 8 hex digits of a version-4 UUID are random)
  return (v_high << 23) | (('x' || left(gen_random_uuid()::text, 8))::bit(32)::bigint & ((1 << 23) - 1));
end
$$;

-- A new UUIDv7 (RFC 9562): the Unix time in milliseconds in the first 48 bits, then a 12-bit
-- counter that starts at random each millisecond and counts up (so the ids one connection
-- makes are strictly increasing, as the uuid crate's are: it runs a millisecond ahead when
-- 4,096 ids fall in one), then the version, variant and random bits. The connection's last
-- millisecond and counter are kept in a setting of its own.
create function jobs._uuid_v7()
returns uuid
language plpgsql volatile parallel safe
as $$
declare
  v_now    bigint := floor(extract(epoch from clock_timestamp()) * 1000)::bigint;
  v_last   text := current_setting('pg_jobs_ids.last', true);
  v_ms     bigint;
  v_count  int;
  v_random text := replace(gen_random_uuid()::text, '-', '');
begin
  if v_last is not null and v_last <> '' and split_part(v_last, ':', 1)::bigint >= v_now then
    v_ms := split_part(v_last, ':', 1)::bigint;
    v_count := split_part(v_last, ':', 2)::int + 1;
    if v_count > 4095 then
      v_ms := v_ms + 1;
      v_count := ('x' || left(v_random, 3))::bit(12)::int >> 1;  -- (half the range: room to count)
    end if;
  else
    v_ms := v_now;
    v_count := ('x' || left(v_random, 3))::bit(12)::int >> 1;
  end if;
  perform set_config('pg_jobs_ids.last', v_ms || ':' || v_count, false);
  -- 48 bits of time, 4 of version (7), 12 of counter, 2 of variant (10), 62 random, of which
  -- the last 8 are the shard's number on a shard (jobs._shard()).
  return (lpad(to_hex(v_ms), 12, '0') || '7' || lpad(to_hex(v_count), 3, '0')
          || to_hex(8 | (('x' || substr(v_random, 17, 1))::bit(4)::int & 3)) || substr(v_random, 18, 13)
          || coalesce(lpad(to_hex(jobs._shard()), 2, '0'), substr(v_random, 31, 2)))::uuid;
end
$$;

-- The SQL-only edition's cron: jobs._cron_problem, jobs._cron_next, jobs._cron_slots and
-- jobs._cron_latest in PL/pgSQL, with the signatures, answers and refusals of src/functions/cron.rs
-- (which the extension runs): the five fields with lists, ranges, steps and names, or a macro;
-- slots as local wall-clock times turned into instants by PostgreSQL's own zone rules, a time
-- a spring-forward skips becoming the instant after the gap and one a fall-back repeats one
-- instant. tests/editions/test_sql_only_cron.py holds the two to the same answers.

-- An expression parsed: the bits of each field (bit n: value n), or what is wrong with it.
create type jobs._cron_parsed as (
  minutes     bigint,
  hours       int,
  days        bigint,
  months      int,
  weekdays    int,
  any_day     boolean,
  any_weekday boolean,
  problem     text
);

-- Rust's {:?} of a string, as src/functions/cron.rs quotes the text it refuses.
create function jobs._cron_quoted(p_text text)
returns text
language plpgsql immutable strict
as $$
declare
  v_out text := '"';
  v_char text;
begin
  foreach v_char in array regexp_split_to_array(p_text, '') loop
    v_out := v_out || case
      when v_char = '\' then '\\'
      when v_char = '"' then '\"'
      when v_char = E'\t' then '\t'
      when v_char = E'\r' then '\r'
      when v_char = E'\n' then '\n'
      when ascii(v_char) < 32 or ascii(v_char) = 127 then format('\u{%s}', to_hex(ascii(v_char)))
      else v_char end;
  end loop;
  return v_out || '"';
end
$$;

-- The bits one field's text names, or NULL when it names none (src/functions/cron.rs, Field::parse).
create function jobs._cron_field(p_text text, p_min int, p_max int, p_names text[])
returns bigint
language plpgsql immutable strict
as $$
declare
  v_bits  bigint := 0;
  v_item  text;
  v_range text;
  v_step  bigint;
  v_from  int;
  v_to    int;
  v_parts text[];
begin
  foreach v_item in array string_to_array(p_text, ',') loop
    if strpos(v_item, '/') > 0 then
      v_range := split_part(v_item, '/', 1);
      v_step := jobs._cron_u32(substr(v_item, strpos(v_item, '/') + 1));
      if v_step is null or v_step < 1 then
        return null;
      end if;
    else
      v_range := v_item;
      v_step := 1;
    end if;
    if v_range = '*' then
      v_from := p_min;
      v_to := p_max;
    elsif strpos(v_range, '-') > 0 then
      v_from := jobs._cron_value(split_part(v_range, '-', 1), p_min, p_max, p_names);
      v_to := jobs._cron_value(substr(v_range, strpos(v_range, '-') + 1), p_min, p_max, p_names);
      if v_from is null or v_to is null or v_from > v_to then
        return null;
      end if;
    else
      v_from := jobs._cron_value(v_range, p_min, p_max, p_names);
      if v_from is null then
        return null;
      end if;
      -- `a/step` runs from a to the end of the field.
      v_to := case when strpos(v_item, '/') > 0 then p_max else v_from end;
    end if;
    for v_n in v_from..v_to by least(v_step, 64)::int loop
      v_bits := v_bits | (1::bigint << v_n);
    end loop;
  end loop;
  return v_bits;
end
$$;

-- A whole number as Rust's u32 parses one (an optional '+', digits, at most 4294967295).
create function jobs._cron_u32(p_text text)
returns bigint
language sql immutable strict
begin atomic
  select case when p_text ~ '^\+?[0-9]+$' and ltrim(ltrim(p_text, '+'), '0') ~ '^[0-9]{0,10}$'
                   and ('0' || ltrim(p_text, '+'))::numeric <= 4294967295
              then ('0' || ltrim(p_text, '+'))::bigint end;
end;

-- One value of a field: a number in its range, or a name (months count from 1).
create function jobs._cron_value(p_text text, p_min int, p_max int, p_names text[])
returns int
language sql immutable strict
begin atomic
  select case when jobs._cron_u32(p_text) between p_min and p_max then jobs._cron_u32(p_text)::int
              when p_text ~ '^[\x01-\x7f]*$' and array_position(p_names, lower(p_text)) is not null
              then array_position(p_names, lower(p_text)) - 1 + case when p_min = 1 then 1 else 0 end end;
end;

create function jobs._cron_parse(p_cron text)
returns jobs._cron_parsed
language plpgsql immutable strict
as $$
declare
  k_names constant text[] := array['minute', 'hour', 'day of month', 'month', 'day of week'];
  k_min   constant int[] := array[0, 0, 1, 1, 0];
  k_max   constant int[] := array[59, 23, 31, 12, 7];
  k_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
  k_days  constant text[] := array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
  v_trimmed  text := regexp_replace(p_cron, '^\s+|\s+$', '', 'g');
  v_expanded text;
  v_parts    text[];
  v_bits     bigint[] := '{}';
  v_field    bigint;
  v_names    text[];
  r          jobs._cron_parsed;
begin
  if left(v_trimmed, 1) = '@' then
    v_expanded := case lower(v_trimmed)
      when '@yearly' then '0 0 1 1 *' when '@annually' then '0 0 1 1 *'
      when '@monthly' then '0 0 1 * *' when '@weekly' then '0 0 * * 0'
      when '@daily' then '0 0 * * *' when '@midnight' then '0 0 * * *'
      when '@hourly' then '0 * * * *' end;
    if v_expanded is null then
      r.problem := format('unknown macro %s: the macros are @yearly, @annually, @monthly, @weekly, '
                          '@daily, @midnight and @hourly', jobs._cron_quoted(v_trimmed));
      return r;
    end if;
  else
    v_expanded := v_trimmed;
  end if;
  v_parts := case when v_expanded = '' then '{}' else regexp_split_to_array(v_expanded, '\s+') end;
  if cardinality(v_parts) <> 5 then
    r.problem := format('a cron expression has 5 fields (minute hour day-of-month month day-of-week), got %s',
                        cardinality(v_parts));
    return r;
  end if;
  for i in 1..5 loop
    v_names := case i when 4 then k_months when 5 then k_days else '{}' end;
    v_field := jobs._cron_field(v_parts[i], k_min[i], k_max[i], v_names);
    if v_field is null then
      r.problem := format('cron field %s (%s) is %s: it accepts %s-%s%s, as a value, a range a-b, a step '
                          '*/n or a-b/n, or a list of them', i, k_names[i], jobs._cron_quoted(v_parts[i]),
                          k_min[i], k_max[i],
                          case when cardinality(v_names) > 0
                               then format(' or names (%s-%s)', v_names[1], v_names[cardinality(v_names)])
                               else '' end);
      return r;
    end if;
    v_bits := v_bits || v_field;
  end loop;
  r.minutes := v_bits[1];
  r.hours := v_bits[2]::int;
  r.days := v_bits[3];
  r.months := v_bits[4]::int;
  r.weekdays := ((v_bits[5] | (v_bits[5] >> 7)) & 127)::int;  -- 7 is Sunday too
  r.any_day := left(v_parts[3], 1) = '*';
  r.any_weekday := left(v_parts[5], 1) = '*';
  return r;
end
$$;

create function jobs._cron_problem(cron text)
returns text
language sql immutable strict parallel safe
begin atomic
  select (jobs._cron_parse(cron)).problem;
end;

-- The slots in (p_after, p_until] (NULL: no end), earliest first, at most p_max
-- (src/functions/cron.rs, Cron::slots, step for step).
create function jobs._cron_find(p_cron text, p_zone text, p_after timestamptz, p_until timestamptz, p_max int)
returns timestamptz[]
language plpgsql stable
as $$
declare
  k_shift constant bigint := 180;        -- a DST change moves a local time by at most this (minutes)
  k_search constant int := 366 * 29;     -- February 29 on a given weekday comes back within 28 years
  k_last constant bigint := 153722852640;  -- the last local minute any zone can hold as an instant
  k_epoch constant timestamp := '2000-01-01 00:00';
  c            jobs._cron_parsed := jobs._cron_parse(p_cron);
  v_minutes    int[];
  v_after_local bigint;
  v_until_local bigint;
  v_first_day  bigint;
  v_last_local bigint;  -- the local minute of the p_max-th slot found
  v_found      timestamptz[] := '{}';
  v_date       date;
  v_local      bigint;
  v_instant    timestamptz;
  v_runs       boolean;      -- the expression runs on this day
begin
  if c.problem is not null then
    raise exception 'pg_jobs: %', c.problem using errcode = '22023';
  end if;
  v_minutes := array(select h * 60 + m from generate_series(0, 23) as h cross join generate_series(0, 59) as m
                     where c.hours & (1 << h) <> 0 and c.minutes & (1::bigint << m) <> 0
                     order by 1);
  v_after_local := floor(extract(epoch from (p_after at time zone p_zone) - k_epoch) / 60);
  v_until_local := case when p_until is null then null
                        else floor(extract(epoch from (p_until at time zone p_zone) - k_epoch) / 60) end;
  v_first_day := floor((v_after_local - k_shift)::numeric / 1440);
  <<days>>
  for v_day in v_first_day..v_first_day + k_search - 1 loop
    v_date := date '2000-01-01' + v_day::int;
    if c.months & (1 << extract(month from v_date)::int) = 0 then
      continue;
    end if;
    -- With both restricted, either matches (as every cron since Vixie's does). (An IF cannot
    -- test a CASE: its THEN ends the IF's condition.)
    v_runs := case when c.any_day and c.any_weekday then true
                   when c.any_day then c.weekdays & (1 << extract(dow from v_date)::int) <> 0
                   when c.any_weekday then c.days & (1::bigint << extract(day from v_date)::int) <> 0
                   else c.weekdays & (1 << extract(dow from v_date)::int) <> 0
                        or c.days & (1::bigint << extract(day from v_date)::int) <> 0 end;
    continue when not v_runs;
    for i in 1..coalesce(cardinality(v_minutes), 0) loop
      v_local := v_day::bigint * 1440 + v_minutes[i];
      continue when v_local < v_after_local - k_shift;
      exit days when (v_until_local is not null and v_local > v_until_local + k_shift)
                  or (v_last_local is not null and v_local > v_last_local + k_shift)
                  or v_local > k_last;
      -- (make_interval: an interval times a number goes through float8, which rounds)
      v_instant := (k_epoch + make_interval(days => (v_local / 1440)::int, mins => (v_local % 1440)::int))
                   at time zone p_zone;
      -- Two local minutes give one instant only around a daylight-saving change, among the
      -- last slots found.
      if v_instant > p_after and (p_until is null or v_instant <= p_until)
         and not v_instant = any(v_found[greatest(1, cardinality(v_found) - 255):]) then
        v_found := v_found || v_instant;
        if cardinality(v_found) >= p_max and v_last_local is null then
          v_last_local := v_local;
        end if;
      end if;
    end loop;
  end loop;
  return array(select t from unnest(v_found) as t order by t limit p_max);
end
$$;

create function jobs._cron_slots(cron text, zone text, after timestamptz, until timestamptz, max int)
returns timestamptz[]
language plpgsql stable strict parallel safe
as $$
begin
  if not isfinite(after) or until = '-infinity' or until <= after or max < 1 then
    -- (the problem of a bad expression is told only when a search runs, as src/functions/cron.rs does)
    return '{}';
  end if;
  return jobs._cron_find(cron, zone, after, case when until = 'infinity' then null else until end, max);
end
$$;

create function jobs._cron_next(cron text, zone text, after timestamptz)
returns timestamptz
language plpgsql stable strict parallel safe
as $$
begin
  if not isfinite(after) then
    return null;
  end if;
  return (jobs._cron_find(cron, zone, after, null, 1))[1];
end
$$;

-- The last slot in (after, until], looking back from until in windows that double.
create function jobs._cron_latest(cron text, zone text, after timestamptz, until timestamptz)
returns timestamptz
language plpgsql stable strict parallel safe
as $$
declare
  v_window bigint := 1;  -- minutes (an interval of the widest would not fit)
  v_start  timestamptz;
  v_latest timestamptz;
  v_next   timestamptz;
begin
  if not isfinite(after) or not isfinite(until) then
    return null;
  end if;
  loop
    v_start := case when until <= after or v_window >= extract(epoch from until - after) / 60 then after
                    else until - make_interval(days => (v_window / 1440)::int, mins => (v_window % 1440)::int) end;
    v_latest := (jobs._cron_find(cron, zone, v_start, until, 1))[1];
    if v_latest is not null then
      loop
        v_next := (jobs._cron_find(cron, zone, v_latest, until, 1))[1];
        exit when v_next is null;
        v_latest := v_next;
      end loop;
      return v_latest;
    end if;
    if v_start = after then
      return null;
    end if;
    v_window := v_window * 2;
  end loop;
end
$$;

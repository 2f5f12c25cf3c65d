//! `pgjobs pause`, `resume`, `fairness` and `schedules`.

use crate::output;
use anyhow::Result;
use tokio_postgres::Client;

pub async fn set_paused(client: &Client, queue: &str, paused: bool) -> Result<()> {
    let sql = if paused {
        "select jobs.pause_queue($1)"
    } else {
        "select jobs.resume_queue($1)"
    };
    client
        .execute(sql, &[&queue])
        .await
        .map_err(|e| output::db_error(&e))?;
    println!(
        "{} queue {queue}",
        if paused { "paused" } else { "resumed" }
    );
    Ok(())
}

/// `jobs.set_fairness`, printing its answer.
pub async fn set_fairness(client: &Client, queue: &str, mode: &str) -> Result<()> {
    let row = client
        .query_one("select jobs.set_fairness($1, $2)", &[&queue, &mode])
        .await
        .map_err(|e| output::db_error(&e))?;
    println!("{}", row.get::<_, String>(0));
    Ok(())
}

/// Each schedule with its last and next slot (for `pgjobs schedules` and the dashboard).
pub const SCHEDULES: &str = "select row_to_json(x) from (
  select s.name, s.cron, s.timezone, s.enabled, s.catch_up,
         date_trunc('second', s.last_slot) as last_slot,
         date_trunc('second', s.next_slot) as next_slot, s.last_job_id, s.last_error, s.job
  from jobs.schedules as s order by s.name) as x";

pub async fn schedules(client: &Client, json: bool, wide: bool) -> Result<()> {
    use output::Column::{Text, Time};
    let rows = output::rows(client, SCHEDULES, &[]).await?;
    let columns = [
        Text("name", "name"),
        Text("cron", "cron"),
        Text("enabled", "enabled"),
        Time(&["last_slot"], "last slot"),
        Time(&["next_slot"], "next slot"),
        Text("last_error", "last error"),
        Text("job", "job"),
    ];
    if json {
        println!("{}", output::json_rows(rows));
    } else {
        println!("{}", output::listing(&rows, wide, &columns, 20));
    }
    Ok(())
}

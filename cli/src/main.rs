//! `pgjobs`: the pg_jobs operators' command. Everything it reads and does goes through the
//! `jobs.*` views and functions, as the role it connects as: the engine decides and refuses
//! as it does for any caller.

mod connect;
mod doctor;
mod filter;
mod finished;
mod jobs;
mod output;
mod owner;
mod queues;
mod role;
mod status;
mod tls;
mod ui;
mod workers;

use clap::{Args, Parser, Subcommand};
use filter::Filters;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "pgjobs",
    version,
    about = "Look at and act on the pg_jobs queues of a PostgreSQL database"
)]
struct Cli {
    /// Connection string (URL or key=value pairs); else DATABASE_URL, else the PG* variables
    #[arg(long, global = true, value_name = "DSN")]
    dsn: Option<String>,
    /// Print JSON instead of tables
    #[arg(long, global = true)]
    json: bool,
    /// Call pg_jobs as a superuser even where a role that is not one owns schema jobs or its
    /// functions (that role could run code as this session); also PGJOBS_TRUST_OWNER=1
    #[arg(long, global = true, env = "PGJOBS_TRUST_OWNER",
          value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    trust_owner: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Bulk {
    /// Job ids (instead of filters)
    ids: Vec<String>,
    #[command(flatten)]
    filters: Filters,
    /// Every job the action can take, when no filter is given
    #[arg(long)]
    all: bool,
    /// At most this many jobs, oldest first
    #[arg(long)]
    limit: Option<i64>,
    /// List the jobs the action would take, and change nothing
    #[arg(long)]
    dry_run: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Each queue's jobs per state, oldest ready job, paused, and outcomes
    Status {
        /// Look again every SECONDS, with outcome rates per minute
        #[arg(long, value_name = "SECONDS")]
        watch: Option<u64>,
        /// With --watch: stop after this many looks
        #[arg(long, requires = "watch")]
        count: Option<u64>,
    },
    /// List jobs, newest first (or sorted by a column)
    Jobs {
        #[command(flatten)]
        filters: Filters,
        /// At most this many
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// The next page: the jobs after this one in the listing's order
        #[arg(long, value_name = "JOB_ID")]
        before: Option<String>,
        /// Sort by this column (ties by id); enqueue order by default
        #[arg(long, value_enum, default_value_t = jobs::SortBy::Enqueued)]
        sort: jobs::SortBy,
        /// Smallest (oldest) first
        #[arg(long)]
        asc: bool,
        /// Every column, whole ids and absolute times (by default: short ids, times relative
        /// to now, a table that fits 120 columns)
        #[arg(long)]
        wide: bool,
    },
    /// Find jobs, newest first: by id or run id (whole), the start or the end of an id, an
    /// idempotency key, or text in the payload or last error (`jobs --find TEXT`)
    Search {
        text: String,
        /// At most this many
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Every column, whole ids and absolute times
        #[arg(long)]
        wide: bool,
    },
    /// One job: payload, result, failed attempts, steps, children, holder
    Show { job_id: String },
    /// Run finished jobs (completed, failed, dead, cancelled) again
    Requeue {
        #[command(flatten)]
        bulk: Bulk,
        /// Drop the run's steps from this one on (jobs.requeue's from_step)
        #[arg(long, value_name = "STEP")]
        from_step: Option<String>,
    },
    /// Cancel live jobs (ready, delayed, running, suspended)
    Cancel {
        #[command(flatten)]
        bulk: Bulk,
    },
    /// Make delayed and snoozed jobs ready now
    Promote {
        #[command(flatten)]
        bulk: Bulk,
    },
    /// Delete finished jobs now, each with its family (children go with their root), as
    /// retention would later
    Delete {
        #[command(flatten)]
        bulk: Bulk,
    },
    /// Pause a queue: claims hand out none of its jobs; running jobs finish
    Pause { queue: String },
    /// Resume a paused queue
    Resume { queue: String },
    /// How claims share a queue: in priority order (none), or in turns among its tenants or
    /// concurrency keys, so no group's backlog starves another
    Fairness {
        queue: String,
        #[arg(value_parser = ["none", "tenant", "concurrency_key"])]
        mode: String,
    },
    /// The recurring schedules, with their last and next slot
    Schedules {
        /// Every column, whole, and absolute times (by default: a table that fits 120 columns)
        #[arg(long)]
        wide: bool,
    },
    /// The workers the database has seen: the jobs each holds, its last claim, when its leases
    /// run out, its connections, and which are gone (every lease they hold lapsed)
    Workers {
        /// Every column, whole, and absolute times (by default: a table that fits 120 columns)
        #[arg(long)]
        wide: bool,
    },
    /// The web dashboard: queues live, jobs by filter, a job's attempts, steps and children,
    /// dead letters by error, bulk actions, schedules, workers
    Ui {
        /// Address and port to listen on; another than loopback needs --token or --basic-auth
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
        listen: String,
        /// Show everything, act on nothing
        #[arg(long)]
        read_only: bool,
        /// Required of every request (a ?token= link, a cookie, or Authorization: Bearer);
        /// also read from PGJOBS_UI_TOKEN or --token-file (an argument is visible in ps)
        #[arg(long, env = "PGJOBS_UI_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Read the token from this file (its first line)
        #[arg(long, value_name = "PATH", conflicts_with = "token")]
        token_file: Option<std::path::PathBuf>,
        /// Also answer requests addressed to this host name (a reverse proxy's), beside the
        /// listen address; repeatable
        #[arg(long, value_name = "HOST")]
        allowed_host: Vec<String>,
        /// Ask browsers for this user name and the password in PGJOBS_UI_PASSWORD (HTTP basic
        /// authentication; behind TLS when it crosses a network)
        #[arg(long, value_name = "USER")]
        basic_auth: Option<String>,
    },
    /// Find what is wrong (preload, sweeper, pending upgrade, long transactions, stuck queues,
    /// bloat, grants), each with its fix; exits 1 when something is
    Doctor {
        /// A transaction open longer than this is reported
        #[arg(long, default_value = "5 minutes", value_name = "INTERVAL")]
        transaction_age: String,
        /// A ready job waiting longer than this (queue not paused) is reported
        #[arg(long, default_value = "5 minutes", value_name = "INTERVAL")]
        ready_age: String,
    },
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    owner::TRUSTED.store(cli.trust_owner, std::sync::atomic::Ordering::Relaxed);
    if let Command::Ui {
        listen,
        read_only,
        token,
        token_file,
        allowed_host,
        basic_auth,
    } = &cli.command
    {
        let token = match token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--token-file {}: {e}", path.display()))?
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_owned(),
            ),
            None => token.clone(),
        };
        let opts = ui::Options {
            listen: listen.clone(),
            read_only: *read_only,
            token,
            allowed_hosts: allowed_host.clone(),
            basic_auth: match basic_auth {
                Some(user) => Some(ui::BasicAuth::new(
                    user,
                    std::env::var("PGJOBS_UI_PASSWORD").ok(),
                )?),
                None => None,
            },
        };
        return ui::serve(cli.dsn.as_deref(), opts).await.map(|_| true);
    }
    let client = connect::connect(cli.dsn.as_deref()).await?;
    let json = cli.json;
    let bulk = |b: &Bulk, from_step: Option<String>| {
        (
            b.ids.clone(),
            b.filters.clone(),
            b.all,
            b.limit,
            b.dry_run,
            from_step,
        )
    };
    let (action, args) = match &cli.command {
        Command::Status { watch, count } => {
            return status::status(&client, *watch, *count, json)
                .await
                .map(|_| true)
        }
        Command::Jobs {
            filters,
            limit,
            before,
            sort,
            asc,
            wide,
        } => {
            let order = jobs::Order {
                by: *sort,
                ascending: *asc,
            };
            return jobs::list(
                &client,
                filters,
                *limit,
                before.as_deref(),
                order,
                json,
                *wide,
            )
            .await
            .map(|_| true);
        }
        Command::Search { text, limit, wide } => {
            let filters = filter::Filters {
                find: Some(text.clone()),
                ..Default::default()
            };
            let order = jobs::Order::default();
            return jobs::list(&client, &filters, *limit, None, order, json, *wide)
                .await
                .map(|_| true);
        }
        Command::Show { job_id } => return jobs::show(&client, job_id, json).await,
        Command::Pause { queue } => {
            return queues::set_paused(&client, queue, true).await.map(|_| true)
        }
        Command::Resume { queue } => {
            return queues::set_paused(&client, queue, false)
                .await
                .map(|_| true)
        }
        Command::Fairness { queue, mode } => {
            return queues::set_fairness(&client, queue, mode)
                .await
                .map(|_| true)
        }
        Command::Schedules { wide } => {
            return queues::schedules(&client, json, *wide).await.map(|_| true)
        }
        Command::Workers { wide } => {
            return workers::workers(&client, json, *wide).await.map(|_| true)
        }
        Command::Ui { .. } => unreachable!("served above"),
        Command::Doctor {
            transaction_age,
            ready_age,
        } => {
            let t = doctor::Thresholds {
                transaction_age: transaction_age.clone(),
                ready_age: ready_age.clone(),
            };
            return doctor::doctor(&client, &t, json).await;
        }
        Command::Requeue { bulk: b, from_step } => {
            (jobs::Action::Requeue, bulk(b, from_step.clone()))
        }
        Command::Cancel { bulk: b } => (jobs::Action::Cancel, bulk(b, None)),
        Command::Promote { bulk: b } => (jobs::Action::Promote, bulk(b, None)),
        Command::Delete { bulk: b } => (jobs::Action::Delete, bulk(b, None)),
    };
    let (ids, filters, all, limit, dry_run, from_step) = args;
    let selection = jobs::Selection {
        ids: &ids,
        filters: &filters,
        all,
        limit,
    };
    jobs::act(
        &client,
        action,
        selection,
        dry_run,
        from_step.as_deref(),
        json,
    )
    .await
}

fn main() -> ExitCode {
    // Output piped into `head` that closes early ends the command quietly, as for any Unix
    // tool, instead of a panic on the broken pipe.
    // SAFETY: called before any thread starts; SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pgjobs: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            // The message may quote the database's data (a queue name, a job's error).
            let lines: Vec<String> = e.to_string().lines().map(output::visible).collect();
            eprintln!("pgjobs: {}", lines.join("\n"));
            ExitCode::from(2)
        }
    }
}

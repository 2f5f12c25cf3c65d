"""A sample project's jobs, as a user writes them (the library's tests run them)."""

import pg_jobs


@pg_jobs.job("send_email")
def send_email(payload, ctx):
    ctx.conn.execute("insert into sent (address) values (%s)", (payload["to"],))
    return {"sent": True}


@pg_jobs.job("send_email_async")
async def send_email_async(payload, ctx):
    await ctx.conn.execute("insert into sent (address) values (%s)", (payload["to"],))
    return {"sent": True}


@pg_jobs.job("flaky", policy=pg_jobs.Policy(max_attempts=1))
def flaky(payload, ctx):
    raise pg_jobs.NonRetryable("never works")

// graphile-worker 0.17.3 with a no-op task, as the bench's anchor for the queue. Its default
// configuration, except `concurrency`, which the bench sets to the ledger workers' total.
// `node graphile_worker.js migrate` installs its schema once, before the workers start.
const { run, runMigrations } = require("graphile-worker");
const { Pool } = require("pg");

const cfg = JSON.parse(process.env.BENCH_PG);

async function main() {
  const pgPool = new Pool({ host: cfg.host, port: cfg.port, user: cfg.user, database: cfg.database });
  if (process.argv[2] === "migrate") {
    await runMigrations({ pgPool });
    await pgPool.end();
    return;
  }
  const runner = await run({
    pgPool,
    concurrency: Number(process.argv[2] || 1),
    taskList: { noop: async () => {} },
  });
  console.log("running");
  await runner.promise;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

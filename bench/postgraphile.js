// PostGraphile 4 serving the ledger database, as the bench's anchor for reads.
// It connects as a login role that is a member of ledger_app (neither owner nor superuser, so row-level
// security applies), verifies the same bearer token as the ledger (HS256), and sets the tenant through
// pgSettings, so that every query runs with `ledger.tenant_id` set, inside a transaction, as the ledger's do.
const http = require("http");
const { postgraphile } = require("postgraphile");
const { Pool } = require("pg");
const jwt = require("jsonwebtoken");

const cfg = JSON.parse(process.env.BENCH_PG);
const secret = process.env.BENCH_JWT_SECRET;
const pool = new Pool({ host: cfg.host, port: cfg.port, user: cfg.user, database: cfg.database });
const middleware = postgraphile(pool, "public", {
  graphqlRoute: "/graphql",
  disableQueryLog: true,
  ignoreRBAC: false,
  pgSettings: async (req) => {
    const token = (req.headers.authorization || "").replace(/^Bearer\s+/i, "");
    const claims = jwt.verify(token, secret, { algorithms: ["HS256"] });
    return { "ledger.tenant_id": claims.tenant };
  },
});
http.createServer(middleware).listen(cfg.listen, "127.0.0.1", () => console.log("listening"));

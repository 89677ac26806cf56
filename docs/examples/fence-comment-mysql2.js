// A job on a mysql2 pool, fenced per statement: every write carries its
// lease in a sqlcommenter comment that fenceproxy reads and removes.
// Run: node fence-comment-mysql2.js host port user password database
// (tested through the proxy by integration/stmtfence_node_test.go).
const mysql = require('mysql2/promise');

// Percent-encode every byte but A-Z a-z 0-9 - . _ ~ (the owner token may be
// any bytes).
function pct(buf) {
  let s = '';
  for (const b of buf) {
    const c = String.fromCharCode(b);
    s += /[A-Za-z0-9\-._~]/.test(c) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return s;
}

// fenceComment(lease) is the comment to put at the start of each statement.
function fenceComment({name, owner, token}) {
  return `/*fence_lease='${pct(Buffer.from(name, 'utf8'))}',fence_owner='${pct(owner)}',fence_token='${token}'*/ `;
}

const [host, port, user, password, database] = process.argv.slice(2);
(async () => {
  const pool = mysql.createPool({host, port: +port, user, password, database, connectionLimit: 2});

  // Take the lease on one connection and read what fence_acquire set there.
  const conn = await pool.getConnection();
  await conn.query("SELECT fence_acquire('invoice:node', 30)");
  const [[v]] = await conn.query('SELECT HEX(@fence_owner) AS owner, CAST(@fence_token AS CHAR) AS token');
  const lease = {name: 'invoice:node', owner: Buffer.from(v.owner, 'hex'), token: v.token};
  // Leave a stale fence in that connection's session: the comment wins.
  await conn.query('SET @fence_token = @fence_token - 1');
  conn.release();

  const fence = fenceComment(lease);
  let valid = 0;
  for (let i = 0; i < 4; i++) {
    // Any connection of the pool: text and prepared statements alike.
    const [r] = i % 2
      ? await pool.execute(fence + 'INSERT INTO invoices (customer, period, amount) VALUES (?, ?, ?)', ['node' + i, '2026-11', 1])
      : await pool.query(fence + 'INSERT INTO invoices (customer, period, amount) VALUES (?, ?, ?)', ['node' + i, '2026-11', 1]);
    valid += r.affectedRows;
  }
  // A fence a takeover made stale: the write matches nothing.
  const stale = fenceComment({...lease, token: BigInt(lease.token) - 1n});
  const [s] = await pool.query(stale + 'UPDATE invoices SET amount = 2 WHERE customer LIKE ?', ['node%']);
  console.log(JSON.stringify({valid, stale: s.affectedRows}));
  await pool.end();
})().catch((e) => { console.error(e.message); process.exit(1); });

-- sysbench workload: oltp_write_only's writes (UPDATE index, UPDATE
-- non-index, DELETE + INSERT in a transaction) on tables protected by a
-- fence, for integration/bench/fenced.sh.
--
-- Each thread takes its own lease once, when it connects, and writes under
-- it. The script finds out where it is connected:
--   through fenceproxy: it takes the lease with SELECT fence_acquire(...)
--     and sends plain statements; the proxy adds the fence;
--   anywhere else (haproxy, the server): it creates the lease row itself and
--     sends every statement with the fence written by hand, in exactly the
--     shape the proxy produces (EXISTS ... LOCK IN SHARE MODE; INSERT ...
--     SELECT ... FROM DUAL WHERE ...).
-- Run `prepare` once on a fresh sbtest database (it creates the lease table).

sysbench.cmdline.options = {
   tables = {"Number of tables", 4},
   table_size = {"Rows per table", 50000},
   lease_table = {"Lease table (schema.name)", "sbtest.fenced_job_leases"},
}

local fence
local con
local lease

-- A lease of its own per thread and run: a name reused across runs or
-- paths would still be held (for a day) by the previous owner.
local function new_lease_name(path)
   return string.format("sb:%s:%d:%d:%d", path, sysbench.tid, os.time(), math.random(1, 1000000000))
end

function prepare()
   local drv = sysbench.sql.driver()
   local c = drv:connect()
   c:query("CREATE TABLE IF NOT EXISTS " .. sysbench.opt.lease_table .. [[ (
      lease_name   VARCHAR(191)    NOT NULL PRIMARY KEY,
      owner_token  VARBINARY(64)   NOT NULL,
      fence_token  BIGINT UNSIGNED NOT NULL,
      leased_until TIMESTAMP(3)    NOT NULL
   ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin]])
end

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   math.randomseed(os.time() + sysbench.tid)
   local ok = pcall(function() con:query("SELECT fence_status()") end)
   if ok then
      fence = ""
      lease = new_lease_name("proxy")
      local rs = con:query(string.format("SELECT fence_acquire('%s', 3600)", lease))
      local row = rs:fetch_row()
      if row == nil or row[1] == nil then
         error("fence_acquire('" .. lease .. "') returned NULL: the writes would all be rejected")
      end
   else
      -- Hand-written fence: the lease row and the session variables.
      lease = new_lease_name("hand")
      con:query(string.format(
         "INSERT INTO %s VALUES ('%s', 'owner-%d', 1, SYSDATE(3) + INTERVAL 1 HOUR)",
         sysbench.opt.lease_table, lease, sysbench.tid))
      con:query(string.format(
         "SELECT @fence_lease := lease_name, @fence_owner := owner_token, @fence_token := fence_token FROM %s WHERE lease_name = '%s'",
         sysbench.opt.lease_table, lease))
      fence = "EXISTS (SELECT 1 FROM " .. sysbench.opt.lease_table .. " AS fence_l WHERE fence_l.lease_name = @fence_lease" ..
         " AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token" ..
         " AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE)"
   end
end

function thread_done()
   if fence == "" then
      con:query("SELECT fence_release()")
   else
      con:query(string.format("DELETE FROM %s WHERE lease_name = '%s'", sysbench.opt.lease_table, lease))
   end
   con:disconnect()
end

local function where(cond)
   if fence == "" then
      return " WHERE " .. cond
   end
   return " WHERE (" .. cond .. ") AND " .. fence
end

local function rnd_str(n)
   return sysbench.rand.string(string.rep("#", n))
end

function event()
   local t = sysbench.rand.uniform(1, sysbench.opt.tables)
   local tbl = "sbtest" .. t
   local id = sysbench.rand.default(1, sysbench.opt.table_size)
   con:query("BEGIN")
   con:query(string.format("UPDATE %s SET k = k + 1%s", tbl, where("id = " .. id)))
   con:query(string.format("UPDATE %s SET c = '%s'%s", tbl, rnd_str(120), where("id = " .. id)))
   local id2 = sysbench.rand.default(1, sysbench.opt.table_size)
   con:query(string.format("DELETE FROM %s%s", tbl, where("id = " .. id2)))
   local k, c, pad = sysbench.rand.default(1, sysbench.opt.table_size), rnd_str(120), rnd_str(60)
   if fence == "" then
      con:query(string.format("INSERT INTO %s (id, k, c, pad) VALUES (%d, %d, '%s', '%s')", tbl, id2, k, c, pad))
   else
      con:query(string.format("INSERT INTO %s (id, k, c, pad) SELECT %d, %d, '%s', '%s' FROM DUAL WHERE %s",
         tbl, id2, k, c, pad, fence))
   end
   con:query("COMMIT")
end

-- sysbench workload for integration/bench/guard.sh: one autocommit fenced
-- write per event through fenceproxy, an UPDATE of a random row by its
-- primary key (--write=update) or an INSERT of a new row (--write=insert),
-- on the table gt of the schema given by --mysql-db. Each thread takes its
-- own lease with SELECT fence_acquire(...) when it connects; the proxy adds
-- the fence (UPDATE: in the statement; INSERT: its guard before it). With
-- fencing.database_guard: triggers the table's guard triggers check the
-- fence again inside the database.

sysbench.cmdline.options = {
   write = {"update or insert", "update"},
   table_size = {"Rows of gt", 50000},
}

local con

function thread_init()
   local drv = sysbench.sql.driver()
   con = drv:connect()
   local lease = string.format("gb:%d:%d:%d", sysbench.tid, os.time(), math.random(1, 1000000000))
   local rs = con:query(string.format("SELECT fence_acquire('%s', 3600)", lease))
   local row = rs:fetch_row()
   if row == nil or row[1] == nil then
      error("fence_acquire('" .. lease .. "') returned NULL: the writes would all be rejected")
   end
end

function thread_done()
   con:query("SELECT fence_release()")
   con:disconnect()
end

function event()
   if sysbench.opt.write == "insert" then
      con:query(string.format("INSERT INTO gt (k, c) VALUES (%d, '%s')", sysbench.rand.default(1, sysbench.opt.table_size),
         sysbench.rand.string(string.rep("#", 60))))
   else
      con:query(string.format("UPDATE gt SET k = k + 1 WHERE id = %d", sysbench.rand.default(1, sysbench.opt.table_size)))
   end
end

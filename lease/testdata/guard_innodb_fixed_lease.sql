CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bi_158e3cb1_reconciliation_runs` BEFORE INSERT ON `app`.`reconciliation_runs` FOR EACH ROW PRECEDES `user_trigger` BEGIN
  IF @fenceproxy_stmt_token IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fence_token, fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.reconciliation_runs refused (', CASE WHEN @fence_owner IS NULL OR @fence_token IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin USING ascii), CONCAT('0x', HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  ELSE
    IF NOT EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.reconciliation_runs refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin USING ascii), CONCAT('0x', HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  END IF;
END;
CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bu_115edfd1_reconciliation_runs` BEFORE UPDATE ON `app`.`reconciliation_runs` FOR EACH ROW BEGIN
  IF @fenceproxy_stmt_token IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fence_token, fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.reconciliation_runs refused (', CASE WHEN @fence_owner IS NULL OR @fence_token IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin USING ascii), CONCAT('0x', HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  ELSE
    IF NOT EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.reconciliation_runs refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin USING ascii), CONCAT('0x', HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  END IF;
END;
CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bd_84bba8ea_reconciliation_runs` BEFORE DELETE ON `app`.`reconciliation_runs` FOR EACH ROW BEGIN
  IF @fenceproxy_stmt_token IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fence_token, fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.reconciliation_runs refused (', CASE WHEN @fence_owner IS NULL OR @fence_token IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin USING ascii), CONCAT('0x', HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  ELSE
    IF NOT EXISTS (SELECT 1 FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `app`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.reconciliation_runs refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin USING ascii), CONCAT('0x', HEX(CONVERT(X'61646d696e3a7265636f6e63696c696174696f6e' USING utf8mb4) COLLATE utf8mb4_bin))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  END IF;
END;

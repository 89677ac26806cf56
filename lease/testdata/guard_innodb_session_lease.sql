CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bi_2d1191b5_invoices` BEFORE INSERT ON `app`.`invoices` FOR EACH ROW PRECEDES `user_trigger` BEGIN
  IF @fenceproxy_stmt_token IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fence_lease AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fence_token, fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fence_lease LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fence_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fence_lease USING ascii), CONCAT('0x', HEX(@fence_lease))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  ELSE
    IF NOT EXISTS (SELECT 1 FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL OR @fenceproxy_stmt_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fenceproxy_stmt_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fenceproxy_stmt_lease USING ascii), CONCAT('0x', HEX(@fenceproxy_stmt_lease))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  END IF;
END;
CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bu_93a5d9c6_invoices` BEFORE UPDATE ON `app`.`invoices` FOR EACH ROW BEGIN
  IF @fenceproxy_stmt_token IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fence_lease AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fence_token, fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fence_lease LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fence_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fence_lease USING ascii), CONCAT('0x', HEX(@fence_lease))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  ELSE
    IF NOT EXISTS (SELECT 1 FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL OR @fenceproxy_stmt_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fenceproxy_stmt_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fenceproxy_stmt_lease USING ascii), CONCAT('0x', HEX(@fenceproxy_stmt_lease))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  END IF;
END;
CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bd_a9e32250_invoices` BEFORE DELETE ON `app`.`invoices` FOR EACH ROW BEGIN
  IF @fenceproxy_stmt_token IS NULL THEN
    IF NOT EXISTS (SELECT 1 FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fence_lease AND fence_l.owner_token = @fence_owner AND fence_l.fence_token = @fence_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fence_token, fence_l.owner_token = @fence_owner, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fence_lease LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fence_owner IS NULL OR @fence_token IS NULL OR @fence_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fence_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fence_lease USING ascii), CONCAT('0x', HEX(@fence_lease))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  ELSE
    IF NOT EXISTS (SELECT 1 FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3) LOCK IN SHARE MODE) THEN
      BEGIN
        DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
        DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
        SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease LOCK IN SHARE MODE);
        SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL OR @fenceproxy_stmt_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fenceproxy_stmt_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fenceproxy_stmt_lease USING ascii), CONCAT('0x', HEX(@fenceproxy_stmt_lease))), ''), ''''), 128);
        SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
      END;
    END IF;
  END IF;
END;

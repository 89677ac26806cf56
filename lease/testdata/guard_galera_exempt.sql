CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bi_2a41e8bf_invoices` BEFORE INSERT ON `app`.`invoices` FOR EACH ROW PRECEDES `user_trigger` BEGIN
  IF NOT (LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) = CONVERT(X'6d69677261746f72' USING utf8mb4) COLLATE utf8mb4_bin OR (LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) = CONVERT(X'6f7073' USING utf8mb4) COLLATE utf8mb4_bin AND SUBSTRING_INDEX(USER(), '@', -1) LIKE CONVERT(X'31302e302e25' USING utf8mb4) COLLATE utf8mb4_general_ci)) THEN
    IF @fenceproxy_stmt_token IS NULL THEN
      UPDATE `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE fence_l.lease_name = @l AND fence_l.owner_token = @`my owner` AND fence_l.fence_token = @t AND fence_l.leased_until > SYSDATE(3);
      IF ROW_COUNT() = 0 THEN
        BEGIN
          DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
          DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
          SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @t, fence_l.owner_token = @`my owner`, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @l LOCK IN SHARE MODE);
          SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @`my owner` IS NULL OR @t IS NULL OR @l IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@l) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@l USING ascii), CONCAT('0x', HEX(@l))), ''), ''''), 128);
          SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
        END;
      END IF;
    ELSE
      UPDATE `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE fence_l.lease_name = @fenceproxy_stmt_lease AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3);
      IF ROW_COUNT() = 0 THEN
        BEGIN
          DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
          DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
          SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease LOCK IN SHARE MODE);
          SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL OR @fenceproxy_stmt_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fenceproxy_stmt_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fenceproxy_stmt_lease USING ascii), CONCAT('0x', HEX(@fenceproxy_stmt_lease))), ''), ''''), 128);
          SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
        END;
      END IF;
    END IF;
  END IF;
END;
CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bu_61eca2e8_invoices` BEFORE UPDATE ON `app`.`invoices` FOR EACH ROW BEGIN
  IF NOT (LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) = CONVERT(X'6d69677261746f72' USING utf8mb4) COLLATE utf8mb4_bin OR (LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) = CONVERT(X'6f7073' USING utf8mb4) COLLATE utf8mb4_bin AND SUBSTRING_INDEX(USER(), '@', -1) LIKE CONVERT(X'31302e302e25' USING utf8mb4) COLLATE utf8mb4_general_ci)) THEN
    IF @fenceproxy_stmt_token IS NULL THEN
      UPDATE `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE fence_l.lease_name = @l AND fence_l.owner_token = @`my owner` AND fence_l.fence_token = @t AND fence_l.leased_until > SYSDATE(3);
      IF ROW_COUNT() = 0 THEN
        BEGIN
          DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
          DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
          SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @t, fence_l.owner_token = @`my owner`, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @l LOCK IN SHARE MODE);
          SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @`my owner` IS NULL OR @t IS NULL OR @l IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@l) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@l USING ascii), CONCAT('0x', HEX(@l))), ''), ''''), 128);
          SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
        END;
      END IF;
    ELSE
      UPDATE `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE fence_l.lease_name = @fenceproxy_stmt_lease AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3);
      IF ROW_COUNT() = 0 THEN
        BEGIN
          DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
          DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
          SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease LOCK IN SHARE MODE);
          SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL OR @fenceproxy_stmt_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fenceproxy_stmt_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fenceproxy_stmt_lease USING ascii), CONCAT('0x', HEX(@fenceproxy_stmt_lease))), ''), ''''), 128);
          SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
        END;
      END IF;
    END IF;
  END IF;
END;
CREATE DEFINER = CURRENT_USER TRIGGER `app`.`fence_guard_v2_bd_3c827df4_invoices` BEFORE DELETE ON `app`.`invoices` FOR EACH ROW BEGIN
  IF NOT (LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) = CONVERT(X'6d69677261746f72' USING utf8mb4) COLLATE utf8mb4_bin OR (LEFT(USER(), CHAR_LENGTH(USER()) - CHAR_LENGTH(SUBSTRING_INDEX(USER(), '@', -1)) - 1) = CONVERT(X'6f7073' USING utf8mb4) COLLATE utf8mb4_bin AND SUBSTRING_INDEX(USER(), '@', -1) LIKE CONVERT(X'31302e302e25' USING utf8mb4) COLLATE utf8mb4_general_ci)) THEN
    IF @fenceproxy_stmt_token IS NULL THEN
      UPDATE `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE fence_l.lease_name = @l AND fence_l.owner_token = @`my owner` AND fence_l.fence_token = @t AND fence_l.leased_until > SYSDATE(3);
      IF ROW_COUNT() = 0 THEN
        BEGIN
          DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
          DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
          SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @t, fence_l.owner_token = @`my owner`, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @l LOCK IN SHARE MODE);
          SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @`my owner` IS NULL OR @t IS NULL OR @l IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@l) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@l USING ascii), CONCAT('0x', HEX(@l))), ''), ''''), 128);
          SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
        END;
      END IF;
    ELSE
      UPDATE `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l SET fence_l.fence_writes = fence_l.fence_writes + 1 WHERE fence_l.lease_name = @fenceproxy_stmt_lease AND UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256 AND fence_l.fence_token = @fenceproxy_stmt_token AND fence_l.leased_until > SYSDATE(3);
      IF ROW_COUNT() = 0 THEN
        BEGIN
          DECLARE fence_row VARCHAR(64) CHARACTER SET ascii;
          DECLARE fence_msg VARCHAR(128) CHARACTER SET utf8mb4;
          SET fence_row = (SELECT CONCAT_WS(',', fence_l.fence_token = @fenceproxy_stmt_token, UNHEX(SHA2(fence_l.owner_token, 256)) = @fenceproxy_stmt_owner_sha256, fence_l.leased_until > SYSDATE(3)) FROM `fence`.`fenced_job_leases` PARTITION (p0) AS fence_l WHERE fence_l.lease_name = @fenceproxy_stmt_lease LOCK IN SHARE MODE);
          SET fence_msg = LEFT(CONCAT('fenceproxy database_guard: write to app.invoices refused (', CASE WHEN @fenceproxy_stmt_owner_sha256 IS NULL OR @fenceproxy_stmt_lease IS NULL THEN 'no_fence' WHEN fence_row IS NULL THEN 'lease_missing' WHEN fence_row LIKE '0,%' THEN 'stale_token' WHEN fence_row LIKE '1,0,%' THEN 'owner_mismatch' ELSE 'expired' END, ') under lease ''', COALESCE(IF(HEX(@fenceproxy_stmt_lease) REGEXP '^([2-6][0-9A-F]|7[0-9A-E])*$', CONVERT(@fenceproxy_stmt_lease USING ascii), CONCAT('0x', HEX(@fenceproxy_stmt_lease))), ''), ''''), 128);
          SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = 9100, MESSAGE_TEXT = fence_msg;
        END;
      END IF;
    END IF;
  END IF;
END;

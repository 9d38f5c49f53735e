-- bench/run.sh "hot-c1": the same read-only point query every transaction.
SELECT abalance FROM pgbench_accounts WHERE aid = 1;

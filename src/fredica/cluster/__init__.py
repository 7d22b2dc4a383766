"""The home cluster (DESIGN §4.14 b, §6): membership, the remote owner store over HTTP, the
router that sends each report to the owner of its task, replication and file fetching."""

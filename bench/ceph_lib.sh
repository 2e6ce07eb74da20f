# Shared by the RADOS benchmarks: the dev cluster of scripts/ceph-dev-cluster.
# Source it after setting `here` (the checkout).
ceph_cluster=$here/scripts/ceph-dev-cluster
ceph_started=0
# ceph_cluster_up: uses the dev cluster that runs, else starts one (which
# ceph_cluster_done stops again); exports its env (CEPH_CONF,
# SLUICE_CEPH_POOL, SLUICE_RADOS_URI).
ceph_cluster_up() {
  if ! "$ceph_cluster" status >/dev/null 2>&1; then
    ceph_started=1
    "$ceph_cluster" start >/dev/null
  fi
  eval "$("$ceph_cluster" env)"
}
ceph_cluster_done() {
  if [ "$ceph_started" = 1 ]; then "$ceph_cluster" stop >/dev/null 2>&1 || true; fi
}

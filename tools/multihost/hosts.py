"""Hosts on one machine for multi-host OpenMPI jobs: N network namespaces
("hosts"), each with its own hostname (a UTS namespace per process started
in it) and one veth link to a bridge in a namespace of its own, on the
private subnet 10.213.0.0/24 (10.213.0.1 is host 0). Nothing is added to
the machine's own namespace. OpenMPI reaches the hosts through an rsh agent
script that runs the remote command inside the target namespace (no sshd).
Between hosts MPI goes over TCP on that subnet only; within a host over
shared memory (vader), as on a real machine, so that a byte across hosts
costs more than one within.

    with Hosts(2) as hosts:              # needs root; Unavailable otherwise
        rc, out, err = run(hosts.mpirun(4, ["./reftrain", ...]))

Torn down on exit, also on failure (the caller turns SIGTERM into an
exit, as check_multihost.py does, for a timeout to unwind).
"""
import os
import shutil
import subprocess
import tempfile

SUBNET = "10.213.0"


class Unavailable(Exception):
    """Network namespaces cannot be made here; the message says why."""


def ip(*args):
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        raise Unavailable("ip %s: %s" % (" ".join(args), p.stderr.strip()))


class Hosts:
    def __init__(self, n, tag=None, rate=None):
        """rate: shape every host's link to it (tc's token bucket, e.g.
        "200mbit"); self.shaped then says how, or why not."""
        self.n, self.rate, self.shaped = n, rate, "unshaped"
        self.tag = tag or "dps%d" % (os.getpid() % 100000)
        self.names = ["%sh%d" % (self.tag, i) for i in range(n)]
        self.switch = self.tag + "sw"
        self.made = []
        self.dir = None

    def address(self, i):
        return "%s.%d" % (SUBNET, i + 1)

    def __enter__(self):
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        if not shutil.which("ip") or not shutil.which("unshare"):
            raise Unavailable("ip (iproute2) and unshare (util-linux) are "
                              "needed")
        try:
            self._make()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _make(self):
        ip("netns", "add", self.switch)
        self.made.append(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            ip("netns", "add", ns)
            self.made.append(ns)
            ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer",
               "name", "p%d" % i, "netns", self.switch)
            ip("-n", ns, "addr", "add", self.address(i) + "/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", self.switch, "link", "set", "p%d" % i, "master", "br0")
            ip("-n", self.switch, "link", "set", "p%d" % i, "up")
        if self.rate:
            self._shape()
        self.dir = tempfile.mkdtemp(prefix="dpshim-hosts.")
        self.agent = os.path.join(self.dir, "agent.sh")
        with open(self.agent, "w") as f:
            f.write("#!/bin/sh\n"
                    "# OpenMPI's rsh agent: HOST COMMAND... runs COMMAND in\n"
                    "# HOST's namespace, under HOST's own hostname.\n"
                    "host=$1; shift\n"
                    "i=${host##*.}; i=$((i - 1))\n"
                    'exec ip netns exec %sh$i unshare --uts sh -c '
                    '"hostname %sh$i; $*"\n' % (self.tag, self.tag))
        os.chmod(self.agent, 0o755)

    def _shape(self):
        """A token bucket on each host's outgoing link: every inter-host
        byte waits for it. (netem's latency would need sch_netem, which
        this kernel may lack: then no latency is added, and shaped says
        so.)"""
        for ns in self.names:
            p = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc",
                                "add", "dev", "eth0", "root", "tbf", "rate",
                                self.rate, "burst", "64kb", "latency",
                                "100ms"], capture_output=True, text=True)
            if p.returncode != 0:
                self.shaped = "unshaped (tc tbf: %s)" % p.stderr.strip()
                return
        self.shaped = "links shaped to %s (tbf; no added latency)" % self.rate

    def __exit__(self, *exc):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        return False

    def mpirun(self, ranks_per_host, command, env=(), mpi_args=()):
        """The command line of an mpirun from host 0 across every host,
        `ranks_per_host` ranks each, exporting the names in `env`."""
        hosts = ",".join("%s:%d" % (self.address(i), ranks_per_host)
                         for i in range(self.n))
        exports = [a for name in env for a in ("-x", name)]
        return (["ip", "netns", "exec", self.names[0], "unshare", "--uts",
                 "sh", "-c", 'hostname %s; exec "$@"' % self.names[0], "sh",
                 "mpirun", "--allow-run-as-root", "--oversubscribe",
                 "--bind-to", "none", "--host", hosts,
                 "-np", str(ranks_per_host * self.n),
                 "--mca", "plm_rsh_agent", self.agent,
                 "--mca", "btl", "tcp,vader,self",
                 "--mca", "btl_tcp_if_include", SUBNET + ".0/24",
                 "--mca", "oob_tcp_if_include", SUBNET + ".0/24",
                 "--mca", "mpi_yield_when_idle", "1"]
                + exports + list(mpi_args) + list(command))

    def bytes_sent(self):
        """Bytes each host has sent on its link so far."""
        out = []
        for ns in self.names:
            p = subprocess.run(["ip", "netns", "exec", ns, "cat",
                                "/sys/class/net/eth0/statistics/tx_bytes"],
                               capture_output=True, text=True)
            out.append(int(p.stdout.strip() or 0))
        return out

"""The private network the comparison runs in: Dropbox's real host names on loopback, a test CA.

rclone has no option for another API base, so it must reach the emulator as api.dropboxapi.com,
content.dropboxapi.com, notify.dropboxapi.com and www.dropbox.com. The harness therefore runs
itself again inside new mount, network and PID namespaces (`unshare`): loopback is the only
interface, a hosts file bind-mounted over /etc/hosts (private to the namespace) sends the four
names to 127.0.0.1, and the emulator listens on port 443 with a certificate for those names,
signed by a throwaway CA that rclone trusts through SSL_CERT_FILE and dbxfs through --ca-file.
dbxfs uses the same real names (no --api-base), so both clients make the same connections.

Nothing outside the namespace sees any of it. The harness is the namespace's init: when it
ends, however it ends, the kernel kills every process left in the namespace (emulator, dbxfs,
rclone) and the mounts go with the mount namespace; `--kill-child` does the same when the
`unshare` process itself is killed.
"""

import os
import subprocess

DROPBOX_HOSTS = ("api.dropboxapi.com", "content.dropboxapi.com", "notify.dropboxapi.com", "www.dropbox.com")


def make_certificates(directory):
    """A CA and a server certificate for the four Dropbox names (and 127.0.0.1), made with the
    openssl CLI. Returns (ca_pem, chain_pem, key_pem): the chain is the server certificate
    followed by the CA, so a client given the chain as its trust file also trusts the CA."""
    os.makedirs(directory, exist_ok=True)
    path = lambda name: os.path.join(directory, name)  # noqa: E731

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3", "-keyout", path("ca.key"),
            "-out", path("ca.pem"), "-subj", "/CN=dbxfs benchmark test CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", path("server.key"), "-out", path("server.csr"),
            "-subj", "/CN=" + DROPBOX_HOSTS[0])
    names = ",".join("DNS:" + host for host in DROPBOX_HOSTS) + ",DNS:localhost,IP:127.0.0.1"
    with open(path("server.ext"), "w") as f:
        f.write(f"subjectAltName={names}\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
            "-CAcreateserial", "-days", "3", "-out", path("server.pem"), "-extfile", path("server.ext"))
    with open(path("chain.pem"), "w") as chain:
        for name in ("server.pem", "ca.pem"):
            with open(path(name)) as part:
                chain.write(part.read())
    return path("ca.pem"), path("chain.pem"), path("server.key")


def unshare_command(argv):
    """The command line that runs `argv` as the init of new mount, network and PID namespaces."""
    return ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--propagation", "private", *argv]


def enter(hosts_path):
    """Inside the namespaces: loopback up, and the Dropbox names resolving to it."""
    if os.getpid() != 1:
        raise RuntimeError("bench-vs-rclone: the inner run must be the init of its own namespaces")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with open(hosts_path, "w") as f:
        f.write("127.0.0.1 localhost\n::1 localhost\n127.0.0.1 " + " ".join(DROPBOX_HOSTS) + "\n")
    subprocess.run(["mount", "--bind", hosts_path, "/etc/hosts"], check=True)

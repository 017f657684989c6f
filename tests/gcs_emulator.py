"""Google Cloud Storage on this machine, for TF's own `gs://` client: `with bucket(DIR) as
root:` starts it in a child process and points this process's tf.io.gfile at it, `root`
being "gs://BUCKET" (`running(DIR)` gives the environment instead of setting it).

TF's GCS file system has its endpoints compiled in (https://www.googleapis.com/storage/v1/,
https://storage.googleapis.com) and no emulator setting, but its libcurl takes a proxy
from `https_proxy`/`http_proxy`, its trusted certificates from `CURL_CA_BUNDLE`, and a
bearer token from `GOOGLE_AUTH_TOKEN_FOR_TESTING`. So the child is that proxy: it answers
CONNECT, speaks TLS with a certificate for both hosts signed by a CA made for the run, and
hands each request to gcp-storage-emulator's handlers over in-memory storage. A child
process, not a thread: `tf.io.TFRecordWriter.close` holds the GIL while it uploads.

Where the emulator differs from GCS, the child does what GCS does:
- a body sent chunked with a Content-Length too (libcurl chunks TF's uploads, which set
  the length) is read as chunked, as HTTP/1.1 says;
- an empty upload (TF's folder marker `DIR/`) is an empty object, not a missing body;
- `GET b/BUCKET/storageLayout` (TF asks it before renaming a folder) says "a flat bucket".

    python -m tests.gcs_emulator DIR   # prints {"proxy": URL, "ca": DIR/ca.pem}, serves
"""

import contextlib
import datetime
import functools
import json
import logging
import os
import re
import ssl
import subprocess
import sys
import threading
import urllib.parse
from http import server as http_server

BUCKET = "electra-test"
HOSTS = ("www.googleapis.com", "storage.googleapis.com")


@contextlib.contextmanager
def running(directory):
    """The emulator in a child process while the block runs (its CA in `directory`);
    yields the environment variables that point TF's `gs://` client at it."""
    from tests import helpers  # pylint: disable=g-import-not-at-top
    child = subprocess.Popen([sys.executable, "-m", "tests.gcs_emulator", str(directory)],
                             stdout=subprocess.PIPE, text=True, cwd=helpers.ROOT,
                             env=helpers.child_env())
    try:
        ready = child.stdout.readline()
        if not ready:
            raise RuntimeError(f"the GCS emulator exited with {child.wait()}")
        ready = json.loads(ready)
        yield {"https_proxy": ready["proxy"], "http_proxy": ready["proxy"],
               "CURL_CA_BUNDLE": ready["ca"], "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
               "NO_GCE_CHECK": "true"}
    finally:
        child.terminate()
        child.wait()
        child.stdout.close()


@contextlib.contextmanager
def bucket(directory):
    """`running(directory)` with its environment set in this process while the block runs
    (then restored); yields "gs://BUCKET"."""
    import pytest  # pylint: disable=g-import-not-at-top
    with running(directory) as env, pytest.MonkeyPatch.context() as patch:
        for name in ("no_proxy", "NO_PROXY"):  # could send libcurl past the emulator
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        yield f"gs://{BUCKET}"


def _write_certificates(directory):
    """A CA (DIR/ca.pem) and a server certificate it signed for `HOSTS` (DIR/server.pem,
    its key DIR/server.key), valid for a day."""
    from cryptography import x509  # pylint: disable=g-import-not-at-top
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(common_name):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def certificate(subject, key, issuer_key, ca):
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(name("electra_tf test CA")).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), True))
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(h) for h in HOSTS]), False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(2))
    ca = certificate(name("electra_tf test CA"), ca_key, ca_key, True)
    server = certificate(name(HOSTS[0]), key, ca_key, False)
    files = {file: os.path.join(directory, file)
             for file in ("ca.pem", "server.pem", "server.key")}
    for file, data in (("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
                       ("server.pem", server.public_bytes(serialization.Encoding.PEM)),
                       ("server.key", key.private_bytes(
                           serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption()))):
        with open(files[file], "wb") as f:
            f.write(data)
    return files


def _serve(directory):
    """Makes the certificates, prints where the proxy listens, serves until killed."""
    from gcp_storage_emulator import server as emulator  # pylint: disable=g-import-not-at-top
    from gcp_storage_emulator.handlers import buckets
    from gcp_storage_emulator.storage import Storage

    read_body = emulator._read_data  # pylint: disable=protected-access

    def read_upload_body(handler, query):
        body = read_body(handler, query)
        return b"" if body is None and query.get("uploadType") == ["media"] else body

    emulator._read_data = read_upload_body  # pylint: disable=protected-access
    storage_lock = threading.Lock()  # the emulator's storage is for one thread at a time

    class Handler(emulator.RequestHandler):
        protocol_version = "HTTP/1.1"
        # Replies go out at once: with Nagle's algorithm each of TF's requests (a connection
        # each) would wait ~40 ms on a delayed ACK, ~20x the request itself.
        disable_nagle_algorithm = True

        def parse_request(self):
            if not super().parse_request():
                return False
            if self.command == "CONNECT":  # the tunnel to HOSTS: TLS from here on
                self._reply(200, b"")
                self.connection = self.server.tls.wrap_socket(self.connection,
                                                              server_side=True)
                self.rfile = self.connection.makefile("rb")
                self.wfile = self.connection.makefile("wb")
                self.close_connection = False
                return False
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                del self.headers["Content-Length"]
            url = urllib.parse.urlsplit(self.path)  # http_proxy's requests name the host
            self.path = url.path + (f"?{url.query}" if url.query else "")
            layout = re.fullmatch(r"/storage/v1/b/([^/]+)/storageLayout", url.path)
            if layout:
                self._reply(200, json.dumps({"kind": "storage#storageLayout",
                                             "bucket": layout.group(1)}).encode())
                return False
            return True

        def _reply(self, status, body):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def log_message(self, format, *args):  # pylint: disable=redefined-builtin
            pass

    for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
        def locked(self, handle=getattr(emulator.RequestHandler, f"do_{method}")):
            with storage_lock:
                handle(self)
        setattr(Handler, f"do_{method}", locked)

    files = _write_certificates(directory)
    storage = Storage(use_memory_fs=True)
    buckets.create_bucket(BUCKET, storage)
    proxy = http_server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, storage))
    proxy.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    proxy.tls.load_cert_chain(files["server.pem"], files["server.key"])
    print(json.dumps({"proxy": f"http://127.0.0.1:{proxy.server_address[1]}",
                      "ca": files["ca.pem"]}), flush=True)
    proxy.serve_forever()


if __name__ == "__main__":
    logging.disable(logging.ERROR)  # the emulator logs each 404, which exists() asks for
    _serve(sys.argv[1])

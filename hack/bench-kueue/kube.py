"""A minimal Kubernetes API client for the benchmark (standard library + PyYAML only).

One `Kube` per kubeconfig (inline client certificate, as the fleet writes them); one HTTPS
connection per thread, kept alive. Enough for create, server-side apply, get, list and watch.
"""

import base64
import http.client
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.parse

import yaml


class ApiError(Exception):
    def __init__(self, status, body, what):
        super().__init__(f"{what}: HTTP {status}: {body[:400]}")
        self.status = status
        self.body = body


class Kube:
    def __init__(self, kubeconfig):
        with open(kubeconfig) as f:
            self.kubeconfig_text = f.read()
        doc = yaml.safe_load(self.kubeconfig_text)
        ctx_name = doc.get("current-context") or doc["contexts"][0]["name"]
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self._dir = tempfile.mkdtemp(prefix="bench-kueue-kube-")
        ca = os.path.join(self._dir, "ca.crt")
        crt = os.path.join(self._dir, "tls.crt")
        key = os.path.join(self._dir, "tls.key")
        for path, field in ((ca, cluster.get("certificate-authority-data")),
                            (crt, user.get("client-certificate-data")),
                            (key, user.get("client-key-data"))):
            if not field:
                raise ValueError(f"{kubeconfig}: needs inline certificate data")
            with open(path, "wb") as f:
                f.write(base64.b64decode(field))
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(crt, key)
        self._local = threading.local()

    def _conn(self, timeout=30):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)
            self._local.conn = c
        return c

    def request(self, method, path, body=None, ctype="application/json", ok=(200, 201)):
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = ctype
        for attempt in range(3):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                text = r.read().decode()
            except (http.client.HTTPException, OSError):
                self._local.conn = None
                c.close()
                if attempt == 2:
                    raise
                time.sleep(0.2)
                continue
            if r.status in ok:
                return json.loads(text) if text else None
            raise ApiError(r.status, text, f"{method} {path}")

    def create(self, path, obj, exist_ok=False):
        try:
            return self.request("POST", path, obj)
        except ApiError as e:
            if exist_ok and e.status == 409:
                return None
            raise

    def apply(self, path, obj, manager="bench-kueue"):
        """Server-side apply of obj at path (the object's own URL), forced."""
        q = urllib.parse.urlencode({"fieldManager": manager, "force": "true"})
        return self.request("PATCH", f"{path}?{q}", obj, ctype="application/apply-patch+yaml")

    def get(self, path, missing_ok=False):
        try:
            return self.request("GET", path)
        except ApiError as e:
            if missing_ok and e.status == 404:
                return None
            raise

    def watch(self, path, resource_version, stop, on_event):
        """Calls on_event(type, object) for every event of a watch on path from
        resource_version, until stop is set; returns the last resourceVersion seen (the caller
        lists again on 410 Gone, raised as ApiError)."""
        rv = resource_version
        while not stop.is_set():
            q = urllib.parse.urlencode({"watch": "true", "resourceVersion": rv,
                                        "allowWatchBookmarks": "true", "timeoutSeconds": "60"})
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=90)
            try:
                c.request("GET", f"{path}?{q}", headers={"Accept": "application/json"})
                r = c.getresponse()
                if r.status != 200:
                    raise ApiError(r.status, r.read().decode(), f"watch {path}")
                while not stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        st = ev["object"]
                        raise ApiError(st.get("code", 500), json.dumps(st), f"watch {path}")
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        on_event(ev["type"], ev["object"])
            except (http.client.HTTPException, OSError):
                time.sleep(0.2)
            finally:
                c.close()
        return rv

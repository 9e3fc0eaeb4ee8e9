"""The fake Kubernetes API of the tests (`controllers.tests.fake_k8s.FakeKube`) with what the
analyzer's Pods need on top, kept apart from the Job-focused parts:

- `GET .../pods/{name}/log` answers the text set by `set_log` (`tailLines` honoured), as the
  kubelet's log endpoint does;
- the kubelet is played by the test: `wait`, `evict` and `deadline` (with `FakeKube`'s `run`,
  `succeed`, `fail`) set a Pod's status in the shapes the kubelet writes; `linger_pods=True`
  keeps deleted Pods Terminating (with a deletionTimestamp) until `reap()`;
- a Pod LIST that lags behind (a watch cache, another API server): `freeze_list()` makes every
  Pod LIST answer the snapshot of that moment, with that moment's resourceVersion (as a stale
  cache does), until `thaw_list()`; GET of one Pod stays current (read from etcd);
- `gc_pods` (the Pod garbage collector) and `end_faults` (an outage that is over) are
  `FakeKube`'s, shared with `scripts/chaos_k8s.py`.
"""
from __future__ import annotations

import copy
import re
from urllib.parse import parse_qs, urlsplit

from controllers.tests.fake_k8s import FakeKube, _Handler, label_matcher, status_body

_LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")


class FakePodKube(FakeKube):
    """`FakeKube` serving Pod logs, with kubelet-shaped status helpers."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.logs: dict[tuple[str, str], str] = {}

    def serve(self) -> FakePodKube:
        fake = self

        class Handler(_PodHandler):
            kube = fake

        from http.server import ThreadingHTTPServer
        import threading

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="fake-k8s-pods")
        self.thread.start()
        return self

    frozen: tuple[int, list[dict]] | None = None

    def freeze_list(self) -> None:
        """Make Pod LISTs answer what is stored now, at today's resourceVersion, until
        `thaw_list`: Pods created, changed or deleted meanwhile are not seen by a LIST."""
        with self.lock:
            self.frozen = (self.rv, [copy.deepcopy(o) for (r, _n, _name), o in
                                     sorted(self.objects.items()) if r == "pods"])

    def thaw_list(self) -> None:
        with self.lock:
            self.frozen = None

    def set_log(self, ns: str, name: str, text: str) -> None:
        with self.lock:
            self.logs[(ns, name)] = text

    def kubectl_delete(self, ns: str, name: str) -> None:
        """`kubectl delete pod NAME`: as the API server's DELETE does, under the lock (the
        fake's writes notify its watchers)."""
        with self.lock:
            self.delete("pods", ns, name, None)

    def pods(self, ns: str) -> list[dict]:
        return self.list("pods", ns)

    def wait(self, ns: str, name: str, reason: str, message: str = "") -> None:
        self.set_pod_status(ns, name, self._container(
            {"waiting": {"reason": reason, "message": message}}, phase="Pending"))

    def evict(self, ns: str, name: str) -> None:
        self.set_pod_status(ns, name, {
            "phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory."})

    def deadline(self, ns: str, name: str) -> None:
        self.set_pod_status(ns, name, {
            "phase": "Failed", "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline"})


class _PodHandler(_Handler):
    def _list(self, res: str, ns: str, query: dict[str, str]):
        frozen = getattr(self.kube, "frozen", None)
        if res != "pods" or frozen is None:
            return super()._list(res, ns, query)
        version, pods = frozen
        match = label_matcher(query.get("labelSelector", ""))
        items = [p for p in pods if p["metadata"].get("namespace") == ns
                 and match(p["metadata"].get("labels"))]
        return 200, {"kind": "PodList", "apiVersion": "v1",
                     "metadata": {"resourceVersion": str(version)}, "items": items}

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        m = _LOG.match(url.path)
        if not m or method != "GET":
            return super()._dispatch(method)
        kube = self.kube
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        ns, name = m.group("ns"), m.group("name")
        from controllers.tests.fake_k8s import Request

        with kube.lock:
            kube.requests.append(Request("GET", "pods/log", ns, name, query))
            if ("pods", ns, name) not in kube.objects:
                body = status_body(404, "NotFound", f'pods "{name}" not found')
                return self._send(404, body)
            text = kube.logs.get((ns, name), "")
        if query.get("tailLines"):
            text = "".join(text.splitlines(keepends=True)[-int(query["tailLines"]):])
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

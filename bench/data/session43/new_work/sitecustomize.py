# diagnostic (session 43): log SteadyGaps' new-work detections to $NEWWORK_LOG.<pid>
import os
if os.environ.get("NEWWORK_LOG"):
    import atexit, json
    from phantom.engine import host as _h
    _orig = _h.SteadyGaps.typical
    _log = []
    def typical(self, site, gap):
        before = self.new_work
        out = _orig(self, site, gap)
        if self.new_work != before:
            n = self._count.get(site, 1) - 1
            _log.append((self._name(site)[:80], n, gap, self._own_mean((site, n))))
        return out
    _h.SteadyGaps.typical = typical
    atexit.register(lambda: _log and open(f"{os.environ['NEWWORK_LOG']}.{os.getpid()}", "w").write(json.dumps(_log)))

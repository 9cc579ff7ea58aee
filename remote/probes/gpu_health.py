"""The GPU's health through NVML: clock-event reasons, ECC, retired/remapped pages, NVLink, PCIe
replays and Xid events, for the sampler (remote/probes/sampler.py).

Utilisation, memory, power and temperature say how loaded a GPU is; these say whether it is
still well: a GPU clocking down on a thermal or power brake, ECC errors climbing, an Xid (a GPU
fallen off the bus, a page retired), NVLink or PCIe errors. The calls and constants are
nvidia-ml-py's (`pynvml`, read from nvidia-ml-py 13.615; docs/stats.md "Health fields").

A field the driver does not have (NVMLError_NotSupported, NoPermission, a function an older
nvidia-ml-py lacks) is left out of the GPU's dict: absent, never 0 and never a crash.

Xid events come from NVML's event API (no root, no dmesg): one event set with every GPU
registered for nvmlEventTypeXidCriticalError, drained with nvmlEventSetWait(set, 0) each sample,
so the wait never blocks the 10 Hz loop (NVML answers NVML_ERROR_TIMEOUT at once when no event
is queued).

Runs on the box with whatever python the box has: stdlib only, Python >= 3.8.
"""

# nvmlClocksEventReason* bits (nvml.h; the older name is nvmlClocksThrottleReason*), as names.
CLOCK_REASONS = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# nvmlDeviceGetTotalEccErrors' NVML_MEMORY_ERROR_TYPE_* and NVML_*_ECC counters, as our key's parts;
# nvmlDeviceGetRetiredPages' NVML_PAGE_RETIREMENT_CAUSE_* (MULTIPLE_SINGLE_BIT_ECC_ERRORS, DOUBLE_BIT_ECC_ERROR).
ECC_ERRORS = ((0, "corrected"), (1, "uncorrected"))
ECC_COUNTERS = ((0, "volatile"), (1, "aggregate"))
RETIRED_PAGES = ((0, "retired_pages_sbe"), (1, "retired_pages_dbe"))
NVML_NVLINK_MAX_LINKS = 18  # nvidia-ml-py 13 raised it to 36; the module's own value wins
# nvmlDeviceGetNvLinkErrorCounter's counters, as our keys.
NVLINK_ERRORS = (
    (0, "replay_errors"),  # NVML_NVLINK_ERROR_DL_REPLAY
    (1, "recovery_errors"),  # NVML_NVLINK_ERROR_DL_RECOVERY
    (2, "crc_flit_errors"),  # NVML_NVLINK_ERROR_DL_CRC_FLIT
    (3, "crc_data_errors"),  # NVML_NVLINK_ERROR_DL_CRC_DATA
)
# nvmlDeviceGetFieldValues ids: NVLink data throughput, a cumulative KiB counter per link.
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_SUCCESS = 0
nvmlEventTypeXidCriticalError = 0x8
NVML_ERROR_TIMEOUT = 10
# At most this many Xid events drained per sample: a storm cannot hold the loop.
MAX_EVENTS_PER_READ = 64


def clock_reason_names(mask):
    return [name for bit, name in CLOCK_REASONS if mask & bit]


class Health(object):
    """The health half of one NVML reader (gpu_query.Nvml): `nvml` the pynvml module, `get`
    the reader's guarded call (None when a call fails)."""

    def __init__(self, reader):
        self.reader = reader
        self.nvml = reader.nvml
        self.handles = reader.handles
        self.links = [self._active_links(h) for h in self.handles]
        self._nvlink_prev = [None] * len(self.handles)  # (t, {link: (tx KiB, rx KiB)})
        self.event_set = None
        self.xid_capable = [False] * len(self.handles)
        self.error = None  # the last unexpected answer of the event wait, for the sampler to say
        self._said = None
        self._open_events()

    # -- each sample --------------------------------------------------------------------------

    def reasons(self, index):
        """{"clock_reasons": [...], "clock_reasons_mask": int}, or {} when not supported."""
        h = self.handles[index]
        mask = self.reader.get("nvmlDeviceGetCurrentClocksEventReasons", h)
        if mask is None:  # nvidia-ml-py before 12.535 has only the older name
            mask = self.reader.get("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if mask is None:
            return {}
        mask = int(mask)
        return {"clock_reasons": clock_reason_names(mask), "clock_reasons_mask": mask}

    def xids(self):
        """{gpu index: [xid, ...]} of the Xid events queued since the last call; a GPU whose
        driver could register for them gets its list even when empty (and only such a GPU)."""
        out = dict((i, []) for i, ok in enumerate(self.xid_capable) if ok)
        if self.event_set is None:
            return out
        for _ in range(MAX_EVENTS_PER_READ):
            try:
                data = self.nvml.nvmlEventSetWait(self.event_set, 0)
            except Exception as exc:  # NVMLError_Timeout: nothing queued (the usual answer)
                if getattr(exc, "value", None) != NVML_ERROR_TIMEOUT:
                    said = "%s: %s" % (type(exc).__name__, exc)
                    if said != self._said:  # once per new answer, not ten times a second
                        self.error = self._said = said
                break
            if int(getattr(data, "eventType", 0)) & nvmlEventTypeXidCriticalError:
                index = self.reader.get("nvmlDeviceGetIndex", data.device)
                if index in out:
                    out[index].append(int(data.eventData))
        return out

    # -- once a second ------------------------------------------------------------------------

    def counters(self, index, now):
        """ECC, retired and remapped pages, PCIe replays, NVLink per link: only what the driver
        answers. `now` (monotonic seconds) turns NVLink's byte counters into rates."""
        h = self.handles[index]
        get = self.reader.get
        out = {}
        for etype, ename in ECC_ERRORS:
            for ctype, cname in ECC_COUNTERS:
                value = get("nvmlDeviceGetTotalEccErrors", h, etype, ctype)
                if value is not None:
                    out["ecc_%s_%s" % (ename, cname)] = int(value)
        for cause, key in RETIRED_PAGES:
            pages = get("nvmlDeviceGetRetiredPages", h, cause)
            if pages is not None:
                out[key] = len(pages)
        pending = get("nvmlDeviceGetRetiredPagesPendingStatus", h)
        if pending is not None:
            out["retired_pages_pending"] = int(pending)
        rows = get("nvmlDeviceGetRemappedRows", h)
        if rows is not None:
            corr, unc, pending_rows, failure = rows
            out.update(remapped_rows_corrected=int(corr), remapped_rows_uncorrected=int(unc),
                       remapped_rows_pending=int(pending_rows), remapped_rows_failure=int(failure))
        replay = get("nvmlDeviceGetPcieReplayCounter", h)
        if replay is not None:
            out["pcie_replay"] = int(replay)
        if self.links[index]:
            out["nvlink"] = self._nvlink(index, now)
        return out

    def _nvlink(self, index, now):
        h = self.handles[index]
        links = self.links[index]
        rows = []
        for link in links:
            row = {"link": link}
            for counter, key in NVLINK_ERRORS:
                value = self.reader.get("nvmlDeviceGetNvLinkErrorCounter", h, link, counter)
                if value is not None:
                    row[key] = int(value)
            rows.append(row)
        ids = [(field, link) for link in links
               for field in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)]
        values = self.reader.get("nvmlDeviceGetFieldValues", h, ids)
        kib = {}
        for v in values or ():
            if int(v.nvmlReturn) == NVML_SUCCESS:
                kib[(int(v.fieldId), int(v.scopeId))] = int(v.value.ullVal)
        now_kib = {}
        for link in links:
            tx = kib.get((NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link))
            rx = kib.get((NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link))
            if tx is not None and rx is not None:
                now_kib[link] = (tx, rx)
        prev = self._nvlink_prev[index]
        self._nvlink_prev[index] = (now, now_kib)
        if prev is not None and now > prev[0]:
            dt = now - prev[0]
            for row in rows:
                before, after = prev[1].get(row["link"]), now_kib.get(row["link"])
                if before is not None and after is not None:
                    row["tx"] = max(0, after[0] - before[0]) * 1024.0 / dt
                    row["rx"] = max(0, after[1] - before[1]) * 1024.0 / dt
        return rows

    # -- setup --------------------------------------------------------------------------------

    def _active_links(self, handle):
        """The links nvmlDeviceGetNvLinkState calls active; [] on a GPU without NVLink (the
        call answers NotSupported) and past the last link (InvalidArgument)."""
        top = int(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", NVML_NVLINK_MAX_LINKS))
        active = []
        for link in range(top):
            state = self.reader.get("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                if link == 0:
                    return []
                continue
            if int(state):
                active.append(link)
        return active

    def _open_events(self):
        event_set = self.reader.get("nvmlEventSetCreate")
        if event_set is None:
            return
        for i, h in enumerate(self.handles):
            try:
                self.nvml.nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, event_set)
                self.xid_capable[i] = True
            except Exception:  # NotSupported on this GPU: its Xids stay absent
                pass
        self.event_set = event_set

    def close(self):
        if self.event_set is not None:
            self.reader.get("nvmlEventSetFree", self.event_set)
            self.event_set = None

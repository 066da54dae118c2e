"""`collabfl doctor`: what stands between this machine and a working federation.

Each check is a small function returning a `Result`: one line that says what was found
and, when it failed, the fix. `checks` lists the ones the given inputs allow; more (a
device check, a client's saved settings) are added by appending functions. Nothing here
changes anything: the checks only connect, read and compare.

The clock matters because of three validity windows (docs/security.md, "Clocks"):
- Flower's SuperLink accepts a SuperNode's signed request only if its timestamp is at most
  `FLOWER_AHEAD_S` (5 s) ahead of the SuperLink's clock and `FLOWER_BEHIND_S` (305 s)
  behind it: a participant whose clock runs more than 5 s fast cannot join at all.
- A peer-fetch grant (kernel/grants.py) expires `grant_ttl_s` (600 s by default) after
  the coordinator issued it, by the serving participant's clock, which is allowed
  `CLOCK_LEEWAY_S` (300 s) of skew: a server whose clock is ahead by more than both
  refuses every grant as expired.
- A run ticket (kernel/tickets.py) expires `--run-ticket-ttl` (7 days by default) after
  its launch, by each participant's clock, with the same leeway: on a scale of days.
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import os
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from collabfl.kernel import netprobe

OK, FAILED, WARNED = "✓", "✗", "!"
EXPIRY_WARN_DAYS = 14
FLOWER_AHEAD_S = 5.0
"""flwr.common.constant.SYSTEM_TIME_TOLERANCE: how far ahead a SuperNode's clock may be."""
FLOWER_BEHIND_S = 305.0
"""TIMESTAMP_TOLERANCE + SYSTEM_TIME_TOLERANCE: how far behind it may be."""
DATE_RESOLUTION_S = 1.0
"""An HTTP Date has whole seconds: the offset read from it is known to about a second."""


@dataclass(frozen=True)
class Result:
    """One finding. `ok`: passed; `warning`: passed, but act soon; `fix`: what to do."""

    ok: bool
    line: str
    fix: str = ""
    warning: bool = False

    def render(self) -> str:
        mark = (WARNED if self.warning else OK) if self.ok else FAILED
        return f"{mark} {self.line}" + (f" — fix: {self.fix}" if self.fix else "")


Check = Callable[[], Result | None]
"""One check; None when it does not apply (what it needs failed an earlier check)."""


@dataclass(frozen=True)
class Inputs:
    """What the operator named: `coordinator` the Fleet gateway and `service` the
    coordinator service (HOST:PORT each), `ca` the federation CA, `data` this
    participant's data file or `data.source` factory (`pkg.mod:factory`, called for
    `client_id`; `allowed`: the daemon's --allow-import, None when the operator names the
    factory here), `peers` other members' peer ports, `state_dir` a daemon's state folder,
    `device` the device a client trains on, `member_cert` this participant's own
    certificate."""

    coordinator: str | None = None
    service: str | None = None
    ca: Path | None = None
    data: Path | str | None = None
    peers: Sequence[str] = field(default_factory=tuple)
    state_dir: Path | None = None
    device: str | None = None
    member_cert: Path | None = None
    client_id: int = 0
    allowed: Sequence[str] | None = None

    def __post_init__(self) -> None:
        """Refuse malformed input before any check runs (ValueError naming the option)."""
        for option, address in (
            ("--coordinator", self.coordinator),
            ("--service", self.service),
            *(("--peer", peer) for peer in self.peers),
        ):
            if address is not None:
                try:
                    netprobe.split_address(address)
                except ValueError as error:
                    raise ValueError(f"{option}: {error}") from None
        if self.ca is not None and not self.ca.is_file():
            raise ValueError(f"--ca: {self.ca} is not a file; give the federation's CA (PEM)")


def reachable(what: str, address: str, fix: str) -> Result:
    """Whether a TCP connection to `address` opens."""
    host, port = netprobe.split_address(address)
    reason = netprobe.unreachable(host, port)
    if reason is None:
        return Result(True, f"{what} {address} reachable")
    return Result(False, f"{what} {address} not reachable: {reason}", fix)


def _verified_context(ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2", "http/1.1"])  # the service speaks gRPC (HTTP/2)
    return context


def certificate_valid(what: str, address: str, ca: Path) -> Result:
    """Whether the TLS server at `address` shows a certificate for the name dialled that
    the CA in `ca` signed."""
    host, port = netprobe.split_address(address)
    try:
        with (
            socket.create_connection((host, port), timeout=netprobe.PROBE_TIMEOUT_S) as raw,
            _verified_context(ca).wrap_socket(raw, server_hostname=host),
        ):
            pass
    except ssl.SSLCertVerificationError as error:
        return _refused_certificate(what, address, ca, error)
    except OSError as error:
        return Result(
            False,
            f"{what} {address}: no TLS handshake ({error})",
            f"check that {address} is the {what}, and that it runs with TLS",
        )
    return Result(True, f"{what} {address}: certificate valid for {host}, signed by {ca}")


def _refused_certificate(
    what: str, address: str, ca: Path, error: ssl.SSLCertVerificationError
) -> Result:
    host, port = netprobe.split_address(address)
    reason = error.verify_message or str(error)
    if "mismatch" in reason:
        try:
            names = netprobe.certificate_names(netprobe.presented_certificate(host, port))
        except OSError:
            names = []
        shown = ", ".join(names) or "no host name"
        example = f" (e.g. {names[0]}:{port})" if names else ""
        return Result(
            False,
            f"{what} {address}: the certificate names {shown}, you dialled {host}",
            f"use one of those names{example}",
        )
    if "expired" in reason:
        return Result(
            False,
            f"{what} {address}: the certificate has expired ({reason})",
            "the operator renews the coordinator's certificate; check this machine's clock",
        )
    return Result(
        False,
        f"{what} {address}: certificate not trusted: {reason}",
        f"--ca must be the federation's CA; {ca} did not sign the certificate served there",
    )


def certificate_expiry(what: str, address: str, now: datetime.datetime | None = None) -> Result:
    """How long the certificate served at `address` stays valid (warn under 14 days)."""
    host, port = netprobe.split_address(address)
    try:
        certificate = netprobe.presented_certificate(host, port)
    except OSError as error:
        return Result(
            False, f"{what} {address}: no certificate read ({error})", "see the lines above"
        )
    renew = "the operator renews the coordinator's certificate"
    return _expiry_result(f"{what} {address}", certificate.not_valid_after_utc, now, renew)


def _expiry_result(
    what: str, not_after: datetime.datetime, now: datetime.datetime | None, renew: str
) -> Result:
    """Failed once expired; a warning under `EXPIRY_WARN_DAYS`."""
    now = now or datetime.datetime.now(datetime.UTC)
    left = not_after - now
    until = not_after.strftime("%Y-%m-%d %H:%M UTC")
    if left.total_seconds() <= 0:
        return Result(False, f"{what}: certificate expired {until}", renew)
    days = f"{left.days} day{'' if left.days == 1 else 's'}"
    line = f"{what}: certificate expires {until} (in {days})"
    if left < datetime.timedelta(days=EXPIRY_WARN_DAYS):
        return Result(True, line, f"{renew} before then", warning=True)
    return Result(True, line)


def clock_offset(address: str, tls: bool) -> Result:
    """This machine's clock against the coordinator's, from the HTTP Date of the Fleet
    gateway's /health. Over TLS the certificate is not checked here (the certificate check
    says whether to trust it): a wrong name must not hide the clock's reading too."""
    host, port = netprobe.split_address(address)
    connection: http.client.HTTPConnection
    timeout = netprobe.PROBE_TIMEOUT_S
    if tls:
        context = ssl._create_unverified_context()
        connection = http.client.HTTPSConnection(host, port, context=context, timeout=timeout)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        sent = time.time()
        connection.request("GET", "/health")
        answer = connection.getresponse()
        received = time.time()
        date = answer.getheader("Date")
    except OSError as error:
        return Result(
            False,
            f"clock: could not read the coordinator's time from {address} ({error})",
            "the Fleet gateway must answer there over HTTP(S): see its lines above",
        )
    finally:
        connection.close()
    if date is None:
        return Result(False, f"clock: {address} sent no Date header", "is it the Fleet gateway?")
    theirs = email.utils.parsedate_to_datetime(date).timestamp() + DATE_RESOLUTION_S / 2
    offset = (sent + received) / 2 - theirs
    margin = DATE_RESOLUTION_S / 2 + (received - sent) / 2
    side = "ahead of" if offset >= 0 else "behind"
    line = f"clock: this machine is {abs(offset):.1f} s (±{margin:.1f} s) {side} the coordinator"
    if offset - margin > FLOWER_AHEAD_S or offset + margin < -FLOWER_BEHIND_S:
        return Result(
            False,
            f"{line}: its SuperLink refuses SuperNode requests signed more than "
            f"{FLOWER_AHEAD_S:g} s ahead or {FLOWER_BEHIND_S:g} s behind its clock, and peers "
            "refuse grants once this much skew exceeds their TTL and 300 s more",
            "synchronise this machine's clock (NTP: `timedatectl set-ntp true`)",
        )
    return Result(True, line)


def data_file(data: Path | str, client_id: int = 0, allowed: Sequence[str] | None = None) -> Result:
    """Whether `data` is a valid client data file, or a `data.source` factory whose sample
    of client `client_id`'s splits is valid (the client daemon's own check)."""
    from collabfl.client.data.opening import check_data, data_ref
    from collabfl.kernel.user_code import UserCodeError

    ref = data_ref(data)
    try:
        line = check_data(ref, client_id, [str(ref)] if allowed is None else allowed)
    except (ValueError, FileNotFoundError) as error:
        if isinstance(error, UserCodeError):
            fix = "then list it in --allow-import (docs/deployment.md, The participant's data)"
            return Result(False, str(error), fix)
        if isinstance(ref, str):
            fix = (
                "make the factory return {train, val (optional), test, num_classes} with "
                "(input, label) items of one shape and labels below num_classes, and list it "
                "in the daemon's --allow-import (docs/deployment.md, The participant's data)"
            )
            return Result(False, str(error), fix)
        return Result(
            False,
            f"data file: {error}",
            "give --data an .npz with x_train y_train x_val y_val x_test y_test and a meta "
            "JSON (client/data/client_file.py; `collabfl federation prepare` makes demo ones)",
        )
    return Result(True, line)


def state_dir_writable(path: Path) -> Result:
    """Whether the daemon could keep its state in `path` (a folder this user may write)."""
    if path.exists() and not path.is_dir():
        return Result(False, f"state dir {path} is not a folder", "give --state-dir a folder")
    folder = path if path.exists() else next(p for p in path.parents if p.exists())
    if not os.access(folder, os.W_OK | os.X_OK):
        return Result(
            False,
            f"state dir {path}: {folder} is not writable by this user",
            "run the daemon as the user owning it, or choose another --state-dir",
        )
    return Result(True, f"state dir {path} writable" + ("" if path.exists() else " (to be made)"))


COORDINATOR_DB = "coordinator.db"
"""What marks a coordinator's state folder (a participant's holds none)."""


def from_state_dir(state_dir: Path, given: Inputs) -> Inputs:
    """`given`, completed from the daemon whose state folder `state_dir` is: a coordinator's
    (its public port, service and CA, checked as a participant would reach them) or a
    participant's (`from_saved_client`)."""
    if (state_dir / COORDINATOR_DB).exists():
        return from_saved_coordinator(state_dir, given)
    return from_saved_client(state_dir, given)


def from_saved_coordinator(state_dir: Path, given: Inputs) -> Inputs:
    """`given`, with the coordinator's own addresses and CA from its saved flags (or its
    defaults): the Fleet gateway and the service, dialled by the first name participants
    use, and the CA it made in STATE/pki unless it was given one."""
    from collabfl.coordinator.settings import CoordinatorSettings, parser, public_names
    from collabfl.kernel.daemon_settings import load

    saved = load(CoordinatorSettings, parser(), ["--state-dir", str(state_dir)])
    name = public_names(saved)[0]
    host = "127.0.0.1" if saved.host in ("0.0.0.0", "::", "") else name
    made_ca = state_dir / "pki" / "ca.pem"
    ca = saved.ssl_ca_certfile or (None if saved.insecure or not made_ca.exists() else made_ca)
    return replace(
        given,
        coordinator=given.coordinator or f"{host}:{saved.superlink_port}",
        service=given.service or f"{host}:{saved.service_port}",
        ca=given.ca or ca,
    )


def from_saved_client(state_dir: Path, given: Inputs) -> Inputs:
    """`given`, with what it leaves out taken from the client daemon's saved settings in
    `state_dir` (kernel/daemon_settings.py), when there are any: the coordinator it dials,
    the service, the CA, the data file, the device and its own certificate."""
    from collabfl.client.settings import ParticipantSettings, parser
    from collabfl.kernel.daemon_settings import read_saved

    saved = read_saved(ParticipantSettings, parser(), state_dir)
    if saved is None:
        return given
    return replace(
        given,
        coordinator=given.coordinator or saved.superlink,
        service=given.service or saved.coordinator_service or None,
        ca=given.ca or saved.root_certificates,
        data=given.data or saved.data,
        client_id=given.client_id if given.data or saved.client_id is None else saved.client_id,
        allowed=given.allowed if given.data else list(saved.allow_import),
        device=given.device or saved.device or None,
        member_cert=given.member_cert or saved.peer_cert,
    )


def device(spec: str) -> Result:
    """Whether the device a client trains on exists here (CUDA visible when asked for)."""
    from collabfl.kernel.devices import device_report

    ok, line = device_report(spec)
    if ok:
        return Result(True, f"device {line}")
    return Result(
        False,
        f"device: {line}",
        "install a CUDA build of torch and check `nvidia-smi`, or choose --device cpu",
    )


def own_certificate(path: Path, now: datetime.datetime | None = None) -> Result:
    """When this participant's own certificate expires (its peers refuse it after)."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(path.read_bytes())
    renew = "ask the operator for a new invitation (`collabfl admin invite`) and join again"
    return _expiry_result(f"this member's certificate {path}", cert.not_valid_after_utc, now, renew)


def checks(inputs: Inputs) -> list[Check]:
    """The checks `inputs` allow, in the order an operator would fix things. The TLS
    checks of an address run only when it is reachable: one cause, one line."""
    found: list[Check] = []
    reached: dict[str, bool] = {}

    def reach(what: str, address: str, fix: str) -> Result:
        result = reachable(what, address, fix)
        reached[address] = result.ok
        return result

    def if_reached(address: str, check: Callable[[], Result]) -> Check:
        return lambda: check() if reached.get(address, True) else None

    for what, address, default_port in (
        ("Fleet gateway", inputs.coordinator, 9093),
        ("coordinator service", inputs.service, 9300),
    ):
        if address is None:
            continue
        port = netprobe.split_address(address)[1]
        fix = (
            f"check the address; on the coordinator, check that the daemon runs and that port "
            f"{port} is open to this machine (default {default_port})"
        )
        found.append(partial(reach, what, address, fix))
        if inputs.ca is not None:
            found.append(if_reached(address, partial(certificate_valid, what, address, inputs.ca)))
            found.append(if_reached(address, partial(certificate_expiry, what, address)))
    if inputs.coordinator is not None:
        tls = inputs.ca is not None
        found.append(if_reached(inputs.coordinator, partial(clock_offset, inputs.coordinator, tls)))
    for peer in inputs.peers:
        fix = "the member at that address runs its client daemon with --peer-listen on it and "
        fix += "its firewall lets members in"
        found.append(partial(reachable, "peer", peer, fix))
    if inputs.data is not None:
        found.append(partial(data_file, inputs.data, inputs.client_id, inputs.allowed))
    if inputs.member_cert is not None:
        found.append(partial(own_certificate, inputs.member_cert))
    if inputs.device is not None:
        found.append(partial(device, inputs.device))
    if inputs.state_dir is not None:
        found.append(partial(state_dir_writable, inputs.state_dir))
    return found


def run(found: Sequence[Check], emit: Callable[[str], None] = print) -> bool:
    """Run every check, emitting its line as it finishes; whether all passed."""
    passed = True
    for check in found:
        result = check()
        if result is None:
            continue
        emit(result.render())
        passed = passed and result.ok
    return passed

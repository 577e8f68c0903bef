//! The processes of a job connect to each other themselves, and every
//! connection proves knowledge of the job's secret before timely takes it
//! (`initialize_networking_from_sockets`). timely's own connect step reads
//! a peer's index from the first 8 bytes of whatever connects and trusts
//! it; here a connection that does not authenticate is dropped, logged with
//! its address, and never takes a peer's place.
//!
//! Process c connects to every process a < c, as timely does. On each
//! connection, with `ctx` = the plan's hash, the git revision and the
//! process count:
//!
//! 1. c → a: `FSTLAUTH`, the protocol version, c, a fresh nonce n_c, and
//!    c's ctx in clear;
//! 2. a → c: a fresh nonce n_a, HMAC-SHA-256(key, "a" ‖ ctx_a ‖ c ‖ a ‖ n_c ‖ n_a)
//!    and a's ctx;
//! 3. c → a: HMAC-SHA-256(key, "c" ‖ ctx_c ‖ c ‖ a ‖ n_c ‖ n_a);
//! 4. a → c: one byte: 1 accepted, 0 another plan.
//!
//! On a connection to process 0, the handshake then measures the clocks:
//! process 0 sends its job clock's origin (µs on its wall clock), then
//! answers [`SYNC_ROUNDS`] pings with its wall clock. The connecting process
//! keeps the round with the shortest round trip (t1 sent, t2 process 0's
//! reading, t3 received): process 0's clock is ahead of its own by
//! t2 − (t1 + t3)/2, within half that round trip, and it takes process 0's
//! origin on its own clock as its job clock's origin. So units of one
//! iteration line up across hosts whose clocks disagree.
//!
//! Both sides prove the key on nonces the other chose, so a recorded
//! exchange cannot be replayed. A side whose proof fails is refused as a
//! stranger (it may be squatting on the port: the dialling side keeps
//! trying until its deadline). Two processes that prove the key but carry
//! different contexts are of the same job's token but another plan or
//! build: both stop at once, saying so. Each accepted connection is handled on its own thread
//! with a deadline, so a client that connects and sends nothing holds up
//! nobody. What is not protected: the traffic after the handshake is
//! neither encrypted nor authenticated message by message.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The first bytes of a connecting process.
const MAGIC: &[u8; 8] = b"FSTLAUTH";
/// The protocol's version.
const VERSION: u32 = 1;
/// A nonce's and a MAC's bytes.
const LEN: usize = 32;
/// Pings of the clock exchange with process 0.
pub const SYNC_ROUNDS: usize = 8;
/// How long one connection may take to authenticate.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections authenticating at once; more are dropped at once.
const MOST_PENDING: usize = 64;

/// What a process needs to connect to its peers.
#[derive(Debug, Clone)]
pub struct Connect<'a> {
    /// Every process's `host:port`, in process order.
    pub addresses: &'a [String],
    /// This process's index.
    pub process: usize,
    /// The job's secret (empty: no token was given; loopback jobs only).
    pub key: &'a [u8],
    /// What the MACs bind: the plan's hash and the revision.
    pub context: String,
    /// How long to wait for every peer.
    pub timeout: Duration,
    /// This process's job clock origin, µs on its wall clock (process 0's
    /// is sent to the others).
    pub origin_us: u64,
}

/// Process 0's clock as a process measured it over its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSync {
    /// Process 0's wall clock minus this process's, µs.
    pub offset_us: i64,
    /// The shortest round trip of the exchange, µs: the offset is right
    /// within half of it.
    pub round_trip_us: u64,
    /// Process 0's job clock origin on this process's wall clock, µs.
    pub origin_us: u64,
}

/// The streams to every other process, in process order (`None` at this
/// one's index), and process 0's clock as measured (processes above 0).
#[derive(Debug)]
pub struct Connected {
    /// One stream a process.
    pub streams: Vec<Option<TcpStream>>,
    /// Process 0's clock.
    pub clock: Option<ClockSync>,
    /// The slowest of this process's handshakes, from the connection's
    /// opening to its handover (the clock exchange included), µs.
    pub handshake_us: u64,
}

/// Connects to every other process and authenticates each connection:
/// one stream a process, in process order, `None` at this process's index.
/// A peer missing at the deadline is an error naming it; a connection that
/// fails to authenticate is logged as a warning and dropped.
pub fn connect(c: &Connect<'_>) -> Result<Connected, String> {
    let deadline = Instant::now() + c.timeout;
    let listener = if c.process + 1 < c.addresses.len() {
        let own = &c.addresses[c.process];
        let l = TcpListener::bind(own).map_err(|e| format!("cannot listen on {own}: {e}"))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("cannot listen on {own}: {e}"))?;
        Some(l)
    } else {
        None
    };
    let lower: Vec<_> = (0..c.process)
        .map(|a| {
            let (address, key) = (c.addresses[a].clone(), c.key.to_vec());
            let (context, (me, n)) = (c.context.clone(), (c.process, c.addresses.len()));
            let at = (deadline, c.timeout);
            std::thread::spawn(move || dial(&address, a, (me, n), &key, &context, at))
        })
        .collect();
    let mut streams: Vec<Option<TcpStream>> = (0..c.addresses.len()).map(|_| None).collect();
    let mut handshake_us = 0;
    if let Some(listener) = listener {
        for (i, s, us) in accept(&listener, c, deadline)? {
            streams[i] = Some(s);
            handshake_us = handshake_us.max(us);
        }
    }
    let mut clock = None;
    for (a, dialing) in lower.into_iter().enumerate() {
        let (stream, sync, us) = dialing
            .join()
            .map_err(|_| format!("connecting to process {a} failed"))??;
        streams[a] = Some(stream);
        clock = clock.or(sync);
        handshake_us = handshake_us.max(us);
    }
    Ok(Connected {
        streams,
        clock,
        handshake_us,
    })
}

/// Connects the processes above 0 to process 0 alone (a star), each
/// connection authenticated as [`connect`]'s are: how they send process 0
/// their files after training ([`crate::run::gather`]). Process 0 waits for
/// every other process until the deadline, and names those missing.
pub fn connect_star(c: &Connect<'_>) -> Result<Connected, String> {
    let deadline = Instant::now() + c.timeout;
    let n = c.addresses.len();
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    if c.process == 0 {
        let own = &c.addresses[0];
        let l = TcpListener::bind(own).map_err(|e| format!("cannot listen on {own}: {e}"))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("cannot listen on {own}: {e}"))?;
        let mut handshake_us = 0;
        for (i, s, us) in accept(&l, c, deadline)? {
            streams[i] = Some(s);
            handshake_us = handshake_us.max(us);
        }
        return Ok(Connected {
            streams,
            clock: None,
            handshake_us,
        });
    }
    let at = (deadline, c.timeout);
    let (s, clock, handshake_us) = dial(&c.addresses[0], 0, (c.process, n), c.key, &c.context, at)?;
    streams[0] = Some(s);
    Ok(Connected {
        streams,
        clock,
        handshake_us,
    })
}

/// The longest context a hello may carry.
const MOST_CONTEXT: usize = 512;

/// How one connection ended on the accepting side.
enum Answer {
    /// Process i proved the key and runs this plan.
    Accepted(usize, TcpStream),
    /// Not a process of this job: logged and dropped.
    Refused(String),
    /// A process of this job's token with another plan or build: the job
    /// stops.
    OtherPlan(String),
}

/// The message for two contexts that differ (`plan|revision|processes`).
fn other_plan(who: usize, theirs: &str, ours: &str) -> String {
    let field = |ctx: &str, i: usize| {
        ctx.split('|')
            .nth(i)
            .unwrap_or("?")
            .chars()
            .take(12)
            .collect::<String>()
    };
    format!(
        "process {who} runs plan {} of build {} ({} processes), this process plan {} of build {} \
         ({} processes): every process must run the same job file and flags, with the same \
         forestall binary",
        field(theirs, 0),
        field(theirs, 1),
        field(theirs, 2),
        field(ours, 0),
        field(ours, 1),
        field(ours, 2)
    )
}

/// HMAC-SHA-256 of the parts, in order.
fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; LEN] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The MAC `side` (b"a" or b"c") sends.
fn proof(
    key: &[u8],
    side: &[u8],
    context: &str,
    (c, a): (usize, usize),
    n_c: &[u8],
    n_a: &[u8],
) -> [u8; LEN] {
    let (c, a) = ((c as u64).to_le_bytes(), (a as u64).to_le_bytes());
    mac(key, &[side, context.as_bytes(), &c, &a, n_c, n_a])
}

/// MACs compared in constant time.
fn same(x: &[u8], y: &[u8]) -> bool {
    x.len() == y.len() && x.iter().zip(y).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

fn nonce() -> Result<[u8; LEN], String> {
    let mut n = [0u8; LEN];
    getrandom::fill(&mut n).map_err(|e| format!("no random nonce: {e}"))?;
    Ok(n)
}

/// Connects to process `a` at `address` until `deadline`, retrying while
/// nothing listens there or what listens does not prove the key.
fn dial(
    address: &str,
    a: usize,
    (me, processes): (usize, usize),
    key: &[u8],
    context: &str,
    (deadline, timeout): (Instant, Duration),
) -> Result<(TcpStream, Option<ClockSync>, u64), String> {
    let mut last = String::from("nothing answered");
    while Instant::now() < deadline {
        let attempt = Instant::now();
        match dial_once(address, a, (me, processes), key, context) {
            Ok((s, sync)) => return Ok((s, sync, attempt.elapsed().as_micros() as u64)),
            Err(Dialled::Fatal(e)) => return Err(format!("process {me}: {e}")),
            Err(Dialled::Retry(e)) => last = e,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "process {me}: not every peer connected within {} s (process {a} at {address}); last: {last}",
        timeout.as_secs_f64()
    ))
}

/// Why a dial did not connect.
enum Dialled {
    /// Nothing there yet, or a stranger: try again until the deadline.
    Retry(String),
    /// The peer is of this job's token but another plan: give up.
    Fatal(String),
}

impl From<String> for Dialled {
    fn from(e: String) -> Self {
        Self::Retry(e)
    }
}

impl From<&str> for Dialled {
    fn from(e: &str) -> Self {
        Self::Retry(e.to_owned())
    }
}

fn dial_once(
    address: &str,
    a: usize,
    (me, _): (usize, usize),
    key: &[u8],
    context: &str,
) -> Result<(TcpStream, Option<ClockSync>), Dialled> {
    let io = |e: std::io::Error| Dialled::Retry(e.to_string());
    let target: SocketAddr = address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .next()
        .ok_or("resolves to no address")?;
    let mut s = TcpStream::connect_timeout(&target, HANDSHAKE_TIMEOUT).map_err(io)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .and_then(|()| s.set_write_timeout(Some(HANDSHAKE_TIMEOUT)))
        .map_err(io)?;
    let n_c = nonce()?;
    let mut hello = Vec::with_capacity(54 + context.len());
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&VERSION.to_le_bytes());
    hello.extend_from_slice(&(me as u64).to_le_bytes());
    hello.extend_from_slice(&n_c);
    hello.extend_from_slice(&(context.len() as u16).to_le_bytes());
    hello.extend_from_slice(context.as_bytes());
    s.write_all(&hello).map_err(io)?;
    let mut reply = [0u8; 2 * LEN];
    s.read_exact(&mut reply)
        .map_err(|e| format!("no proof of the job's key ({e})"))?;
    let (n_a, mac_a) = reply.split_at(LEN);
    let theirs = read_context(&mut s)?;
    if !same(mac_a, &proof(key, b"a", &theirs, (me, a), &n_c, n_a)) {
        return Err(
            "what answers does not prove the job's key (a stranger, or another token)".into(),
        );
    }
    s.write_all(&proof(key, b"c", context, (me, a), &n_c, n_a))
        .map_err(io)?;
    if theirs != context {
        return Err(Dialled::Fatal(other_plan(a, &theirs, context)));
    }
    let mut ok = [0u8; 1];
    s.read_exact(&mut ok)
        .map_err(|_| "it refused our proof (is the token the same on every host?)".to_owned())?;
    let sync = match a {
        0 => Some(measure_clock(&mut s)?),
        _ => None,
    };
    Ok((handed_over(s)?, sync))
}

/// The connecting side of the clock exchange with process 0.
fn measure_clock(s: &mut TcpStream) -> Result<ClockSync, String> {
    let read_u64 = |s: &mut TcpStream| -> Result<u64, String> {
        let mut b = [0u8; 8];
        s.read_exact(&mut b)
            .map_err(|e| format!("clock exchange: {e}"))?;
        Ok(u64::from_le_bytes(b))
    };
    let origin_0 = read_u64(s)?;
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..SYNC_ROUNDS {
        let t1 = crate::run::wallclock::unix_now_us();
        s.write_all(b"p")
            .map_err(|e| format!("clock exchange: {e}"))?;
        let t2 = read_u64(s)?;
        let t3 = crate::run::wallclock::unix_now_us();
        let round_trip = t3.saturating_sub(t1);
        let offset = t2 as i64 - ((t1 as i64 + t3 as i64) / 2);
        if best.is_none_or(|(r, _)| round_trip < r) {
            best = Some((round_trip, offset));
        }
    }
    let (round_trip_us, offset_us) = best.ok_or("no clock exchange")?;
    Ok(ClockSync {
        offset_us,
        round_trip_us,
        origin_us: (origin_0 as i64 - offset_us).max(0) as u64,
    })
}

/// Process 0's side of the clock exchange: its origin, then its clock for
/// every ping.
fn answer_clock(s: &mut TcpStream, origin_us: u64) -> Result<(), String> {
    let e = |e: std::io::Error| format!("clock exchange: {e}");
    s.write_all(&origin_us.to_le_bytes()).map_err(e)?;
    for _ in 0..SYNC_ROUNDS {
        let mut ping = [0u8; 1];
        s.read_exact(&mut ping).map_err(e)?;
        let now = crate::run::wallclock::unix_now_us();
        s.write_all(&now.to_le_bytes()).map_err(e)?;
    }
    Ok(())
}

/// A context in a hello or a reply: its length (u16), then its bytes.
fn read_context(s: &mut TcpStream) -> Result<String, String> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len)
        .map_err(|e| format!("no context ({e})"))?;
    let len = u16::from_le_bytes(len) as usize;
    if len > MOST_CONTEXT {
        return Err(format!("a context of {len} bytes"));
    }
    let mut bytes = vec![0u8; len];
    s.read_exact(&mut bytes)
        .map_err(|e| format!("no context ({e})"))?;
    String::from_utf8(bytes).map_err(|_| "a context that is not text".to_owned())
}

/// The stream as timely wants it: blocking, no timeouts, no delay.
fn handed_over(s: TcpStream) -> Result<TcpStream, String> {
    s.set_read_timeout(None)
        .and_then(|()| s.set_write_timeout(None))
        .and_then(|()| s.set_nodelay(true))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Accepts until every process above this one has authenticated, or the
/// deadline: (process, stream, its handshake's µs) for each.
fn accept(
    listener: &TcpListener,
    c: &Connect<'_>,
    deadline: Instant,
) -> Result<Vec<(usize, TcpStream, u64)>, String> {
    let n = c.addresses.len();
    let mut found: Vec<Option<(TcpStream, u64)>> = (0..n).map(|_| None).collect();
    let (tx, rx) = mpsc::channel::<(SocketAddr, Answer, u64)>();
    let mut pending = 0usize;
    let missing = |found: &[Option<(TcpStream, u64)>]| {
        (c.process + 1..n).filter(|&i| found[i].is_none()).count()
    };
    while missing(&found) > 0 {
        if Instant::now() >= deadline {
            let absent: Vec<String> = (c.process + 1..n)
                .filter(|&i| found[i].is_none())
                .map(|i| format!("process {i} at {}", c.addresses[i]))
                .collect();
            return Err(format!(
                "process {}: not every peer connected within {} s ({}); is every process started \
                 with the same hostfile and token?",
                c.process,
                c.timeout.as_secs_f64(),
                absent.join(", ")
            ));
        }
        match listener.accept() {
            Ok((stream, from)) if pending < MOST_PENDING => {
                pending += 1;
                let (tx, key, context, me) =
                    (tx.clone(), c.key.to_vec(), c.context.clone(), c.process);
                let origin = c.origin_us;
                std::thread::spawn(move || {
                    let started = Instant::now();
                    let answered = answer(stream, (me, n), &key, &context, origin);
                    let us = started.elapsed().as_micros() as u64;
                    let _ = tx.send((from, answered, us));
                });
            }
            Ok((_, from)) => {
                tracing::warn!("refused a connection from {from}: too many connecting at once")
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("cannot accept on {}: {e}", c.addresses[c.process])),
        }
        while let Ok((from, outcome, us)) = rx.try_recv() {
            pending -= 1;
            match outcome {
                Answer::Accepted(i, s) if found[i].is_none() => found[i] = Some((s, us)),
                Answer::Accepted(i, _) => {
                    warn_refused(from, &format!("process {i} is connected already"));
                }
                Answer::Refused(why) => warn_refused(from, &why),
                Answer::OtherPlan(why) => return Err(format!("process {}: {why}", c.process)),
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(found
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|(s, us)| (i, s, us)))
        .collect())
}

fn warn_refused(from: SocketAddr, why: &str) {
    tracing::warn!("refused a connection from {from}: {why}");
}

/// The accepting side of one connection: nothing is read beyond the
/// handshake, and every read has a deadline.
fn answer(s: TcpStream, at: (usize, usize), key: &[u8], context: &str, origin_us: u64) -> Answer {
    authenticate(s, at, key, context, origin_us).unwrap_or_else(Answer::Refused)
}

/// [`answer`]'s steps; an error is a refusal.
fn authenticate(
    s: TcpStream,
    (me, processes): (usize, usize),
    key: &[u8],
    context: &str,
    origin_us: u64,
) -> Result<Answer, String> {
    s.set_nonblocking(false)
        .and_then(|()| s.set_read_timeout(Some(HANDSHAKE_TIMEOUT)))
        .and_then(|()| s.set_write_timeout(Some(HANDSHAKE_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut hello = [0u8; 52];
    let mut s = s;
    s.read_exact(&mut hello)
        .map_err(|e| format!("no greeting within {} s ({e})", HANDSHAKE_TIMEOUT.as_secs()))?;
    if &hello[..8] != MAGIC {
        return Err("not a forestall process (bad greeting)".into());
    }
    let version = u32::from_le_bytes(hello[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("protocol version {version}, not {VERSION}"));
    }
    let c = u64::from_le_bytes(hello[12..20].try_into().expect("8 bytes"));
    if c <= me as u64 || c >= processes as u64 {
        return Err(format!(
            "claims to be process {c}, which does not connect here"
        ));
    }
    let c = c as usize;
    let n_c = &hello[20..52];
    let mut s = s;
    let theirs = read_context(&mut s)?;
    let n_a = nonce()?;
    let mut reply = Vec::with_capacity(2 * LEN + 2 + context.len());
    reply.extend_from_slice(&n_a);
    reply.extend_from_slice(&proof(key, b"a", context, (c, me), n_c, &n_a));
    reply.extend_from_slice(&(context.len() as u16).to_le_bytes());
    reply.extend_from_slice(context.as_bytes());
    s.write_all(&reply).map_err(|e| e.to_string())?;
    let mut mac_c = [0u8; LEN];
    s.read_exact(&mut mac_c)
        .map_err(|e| format!("no proof of the job's key ({e})"))?;
    if !same(&mac_c, &proof(key, b"c", &theirs, (c, me), n_c, &n_a)) {
        return Err(format!(
            "claims to be process {c} but does not prove the job's key (a stranger, or another \
             token)"
        ));
    }
    if theirs != context {
        let _ = s.write_all(&[0]);
        return Ok(Answer::OtherPlan(other_plan(c, &theirs, context)));
    }
    s.write_all(&[1]).map_err(|e| e.to_string())?;
    if me == 0 {
        answer_clock(&mut s, origin_us)?;
    }
    Ok(Answer::Accepted(c, handed_over(s)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231, test case 2.
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let m = mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// `n` ports on 127.0.0.1 that were free a moment ago.
    fn addresses(n: usize) -> Vec<String> {
        let held: Vec<TcpListener> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        held.iter()
            .map(|l| l.local_addr().expect("bound").to_string())
            .collect()
    }

    fn start(
        addresses: &[String],
        process: usize,
        key: &'static [u8],
        context: &str,
    ) -> std::thread::JoinHandle<Result<Vec<Option<TcpStream>>, String>> {
        let (addresses, context) = (addresses.to_vec(), context.to_owned());
        std::thread::spawn(move || {
            connect(&Connect {
                addresses: &addresses,
                process,
                key,
                context,
                timeout: Duration::from_secs(3),
                origin_us: 1_000_000,
            })
            .map(|c| c.streams)
        })
    }

    #[test]
    fn three_processes_with_the_key_connect_each_to_each() {
        let a = addresses(3);
        let runs: Vec<_> = (0..3).map(|p| start(&a, p, b"secret", "plan")).collect();
        for (p, run) in runs.into_iter().enumerate() {
            let streams = run.join().expect("joins").expect("connects");
            assert_eq!(streams.len(), 3);
            for (i, s) in streams.iter().enumerate() {
                assert_eq!(s.is_none(), i == p, "process {p}: stream {i}");
            }
        }
    }

    #[test]
    fn another_key_does_not_connect_and_another_plan_stops_both() {
        let a = addresses(2);
        let zero = start(&a, 0, b"secret", "plan|rev|2");
        let one = start(&a, 1, b"other!", "plan|rev|2");
        let e0 = zero.join().expect("joins").expect_err("refused");
        let e1 = one.join().expect("joins").expect_err("refused");
        assert!(
            e0.contains("not every peer connected") && e0.contains("process 1"),
            "{e0}"
        );
        assert!(e1.contains("does not prove the job's key"), "{e1}");
        let a = addresses(2);
        let started = Instant::now();
        let zero = start(&a, 0, b"secret", "plan|rev|2");
        let one = start(&a, 1, b"secret", "other|rev|2");
        for e in [zero, one].map(|t| t.join().expect("joins").expect_err("stops")) {
            assert!(
                e.contains("every process must run the same job file and flags"),
                "{e}"
            );
            assert!(e.contains("plan other"), "{e}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "at once, not at the deadline"
        );
    }

    /// The processes above 0 measure process 0's clock (here the same
    /// clock: the offset is within the round trip) and learn its origin;
    /// process 0 measures nothing.
    #[test]
    fn processes_above_0_learn_process_0s_clock_and_origin() {
        let a = addresses(2);
        let run = |p: usize, origin_us: u64| {
            let a = a.clone();
            std::thread::spawn(move || {
                connect(&Connect {
                    addresses: &a,
                    process: p,
                    key: b"k",
                    context: "plan".into(),
                    timeout: Duration::from_secs(3),
                    origin_us,
                })
            })
        };
        let (zero, one) = (run(0, 1_000_000), run(1, 7));
        let zero = zero.join().expect("joins").expect("connects");
        let one = one.join().expect("joins").expect("connects");
        assert_eq!(zero.clock, None);
        let sync = one.clock.expect("measured");
        let slack = sync.round_trip_us.max(1) as i64;
        assert!(sync.offset_us.abs() <= slack, "{sync:?}");
        assert!(
            (sync.origin_us as i64 - 1_000_000).abs() <= slack,
            "{sync:?}"
        );
    }

    /// Rogue clients connect first and stay connected (garbage, nothing at
    /// all, a wrong proof); the real peer still gets in, and nobody hangs.
    #[test]
    fn rogues_that_come_first_take_no_place() {
        let a = addresses(2);
        let zero = start(&a, 0, b"secret", "plan");
        let target = a[0].clone();
        let connect_soon = || loop {
            if let Ok(s) = TcpStream::connect(&target) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut garbage = connect_soon();
        garbage
            .write_all(&[1, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xEE])
            .expect("writes");
        let _silent = connect_soon();
        let mut liar = connect_soon();
        let mut hello = Vec::new();
        hello.extend_from_slice(MAGIC);
        hello.extend_from_slice(&VERSION.to_le_bytes());
        hello.extend_from_slice(&1u64.to_le_bytes());
        hello.extend_from_slice(&[7u8; 32]);
        hello.extend_from_slice(&4u16.to_le_bytes());
        hello.extend_from_slice(b"plan");
        liar.write_all(&hello).expect("writes");
        liar.write_all(&[9u8; 32]).expect("a made-up proof");
        let one = start(&a, 1, b"secret", "plan");
        let streams = zero.join().expect("joins").expect("the real peer connects");
        assert!(streams[1].is_some());
        one.join().expect("joins").expect("connects");
    }
}

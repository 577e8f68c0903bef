//! One checkpoint file: a magic line, a JSON header, a payload of `f64`s
//! (little-endian, bit-exact) and a SHA-256 of everything before it.
//!
//! ```text
//!   FORESTALL-CHECKPOINT-1\n | header length (u32 LE) | header (JSON)
//!   | payload (header.floats × f64 LE) | SHA-256 of all of the above (32 bytes)
//! ```

use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

const MAGIC: &[u8] = b"FORESTALL-CHECKPOINT-1\n";
const DIGEST_LEN: usize = 32;

/// Why a checkpoint file's bytes cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Not a checkpoint file (or one of another format version).
    #[error("not a forestall checkpoint (no FORESTALL-CHECKPOINT-1 header)")]
    Magic,
    /// Shorter than its own header says: cut off while written or copied.
    #[error("truncated: {len} bytes")]
    Truncated {
        /// The file's length.
        len: usize,
    },
    /// The checksum does not match the content.
    #[error("checksum mismatch: the file is corrupt")]
    Checksum,
    /// The header does not parse.
    #[error("bad header: {0}")]
    Header(String),
}

/// Encodes `header` and `payload` as one checkpoint file's bytes.
pub fn encode<H: Serialize>(header: &H, payload: &[f64]) -> Vec<u8> {
    let header = serde_json::to_vec(&Envelope {
        floats: payload.len() as u64,
        header,
    })
    .expect("a checkpoint header always serialises");
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + header.len() + payload.len() * 8 + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&header);
    for x in payload {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    let digest = Sha256::digest(&bytes);
    bytes.extend_from_slice(&digest);
    bytes
}

/// Decodes a checkpoint file's bytes, verifying the checksum first.
pub fn decode<H: DeserializeOwned>(bytes: &[u8]) -> Result<(H, Vec<f64>), FormatError> {
    if !bytes.starts_with(MAGIC) {
        return Err(if MAGIC.starts_with(bytes) {
            FormatError::Truncated { len: bytes.len() }
        } else {
            FormatError::Magic
        });
    }
    let len = bytes.len();
    if len < MAGIC.len() + 4 + DIGEST_LEN {
        return Err(FormatError::Truncated { len });
    }
    let (body, digest) = bytes.split_at(len - DIGEST_LEN);
    if Sha256::digest(body).as_slice() != digest {
        // A file cut short fails here too: shorter than its header says.
        return Err(if expected_len(bytes).is_none_or(|e| e > len) {
            FormatError::Truncated { len }
        } else {
            FormatError::Checksum
        });
    }
    let rest = &body[MAGIC.len()..];
    let header_len = read_u32(rest) as usize;
    let rest = &rest[4..];
    if header_len > rest.len() {
        return Err(FormatError::Truncated { len });
    }
    let (header, payload) = rest.split_at(header_len);
    let envelope: Envelope<H> =
        serde_json::from_slice(header).map_err(|e| FormatError::Header(e.to_string()))?;
    if envelope.floats.checked_mul(8) != Some(payload.len() as u64) {
        return Err(FormatError::Header(format!(
            "the header announces {} values, the payload holds {} bytes",
            envelope.floats,
            payload.len()
        )));
    }
    let values = payload
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Ok((envelope.header, values))
}

/// The length the file's header announces, if the header is all there.
fn expected_len(bytes: &[u8]) -> Option<usize> {
    let rest = &bytes[MAGIC.len()..];
    let header_len = read_u32(rest) as usize;
    let header = rest.get(4..4 + header_len)?;
    let envelope: Envelope<serde::de::IgnoredAny> = serde_json::from_slice(header).ok()?;
    let floats = usize::try_from(envelope.floats).ok()?;
    Some(MAGIC.len() + 4 + header_len + floats.checked_mul(8)? + DIGEST_LEN)
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

#[derive(Serialize, serde::Deserialize)]
struct Envelope<H> {
    floats: u64,
    header: H,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct H {
        iteration: u64,
    }

    #[test]
    fn round_trips_bit_exact_values() {
        let values = vec![0.1, -0.0, f64::MIN_POSITIVE, 1e300, f64::NAN];
        let bytes = encode(&H { iteration: 7 }, &values);
        let (h, back): (H, Vec<f64>) = decode(&bytes).expect("decodes");
        assert_eq!(h, H { iteration: 7 });
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let bytes = encode(&H { iteration: 3 }, &[1.0, 2.0, 3.0]);
        for cut in 0..bytes.len() {
            let err = decode::<H>(&bytes[..cut]).expect_err("truncated");
            assert!(
                matches!(
                    err,
                    FormatError::Truncated { .. } | FormatError::Checksum | FormatError::Magic
                ),
                "cut at {cut}: {err}"
            );
        }
        for i in MAGIC.len()..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert!(decode::<H>(&bad).is_err(), "flip at {i} accepted");
        }
        let mut other = bytes.clone();
        other[0] = b'X';
        assert_eq!(decode::<H>(&other).unwrap_err(), FormatError::Magic);
        let half = &bytes[..bytes.len() - 20];
        assert!(matches!(
            decode::<H>(half),
            Err(FormatError::Truncated { .. })
        ));
        let mut flipped = bytes.clone();
        let at = bytes.len() - 40;
        flipped[at] ^= 1;
        assert_eq!(decode::<H>(&flipped).unwrap_err(), FormatError::Checksum);
    }
}

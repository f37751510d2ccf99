//! CI providers' id tokens as compact JWS (RFC 7515): parsed, and verified with a public key of the
//! issuer's JWKS, for the allowed algorithms only: RS256 and ES256. `none` and the HMAC algorithms are
//! refused (an HS256 token "signed" with a public key proves nothing), and the headers that name keys
//! (`jku`, `x5u`, `jwk`, `x5c`) are never read: keys come only from the issuer's discovery.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::Verifier;
use rsa::traits::PublicKeyParts;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The longest id token taken (GitHub's are about 1.5 KB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// RSA keys shorter than this are not believed.
const MIN_RSA_BITS: usize = 2048;

/// Keys of one JWKS that are kept (the rest are ignored).
const MAX_KEYS: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
}

impl Alg {
    fn parse(name: &str) -> Option<Alg> {
        match name {
            "RS256" => Some(Alg::Rs256),
            "ES256" => Some(Alg::Es256),
            _ => None,
        }
    }
}

/// A parsed token: what it claims, believed only once [`Jws::verify`] said yes.
pub struct Jws<'a> {
    pub alg: Alg,
    pub kid: Option<String>,
    pub claims: Map<String, Value>,
    signing_input: &'a str,
    signature: Vec<u8>,
}

/// The header fields read; every other one (`jku`, `x5u`, `jwk`, `x5c`, `typ`, …) is ignored.
#[derive(Deserialize)]
struct Header {
    alg: Option<String>,
    kid: Option<String>,
    crit: Option<Value>,
}

fn part(b64: &str, what: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|_| format!("the id token's {what} is not base64url"))
}

/// Splits and decodes a token; the messages say which check failed, never what the token holds.
pub fn parse(token: &str) -> Result<Jws<'_>, String> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err("the id token is too long".into());
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the id token is not a signed JWT (header.payload.signature)".into());
    };
    let header: Header = serde_json::from_slice(&part(h, "header")?)
        .map_err(|_| "the id token's header is not a JSON object".to_string())?;
    if header.crit.is_some() {
        return Err("the id token has critical header extensions, which are not understood".into());
    }
    let alg = header.alg.as_deref().and_then(Alg::parse).ok_or_else(|| {
        "the id token's algorithm (alg) is not allowed: only RS256 and ES256 are".to_string()
    })?;
    let claims: Map<String, Value> = serde_json::from_slice(&part(c, "payload")?)
        .map_err(|_| "the id token's payload is not a JSON object".to_string())?;
    Ok(Jws {
        alg,
        kid: header.kid,
        claims,
        signing_input: &token[..h.len() + 1 + c.len()],
        signature: part(s, "signature")?,
    })
}

impl Jws<'_> {
    /// Whether `key` made the signature.
    pub fn verify(&self, key: &Jwk) -> bool {
        let input = self.signing_input.as_bytes();
        match (&key.key, self.alg) {
            (PublicKey::Rsa(k), Alg::Rs256) => {
                rsa::pkcs1v15::Signature::try_from(&self.signature[..])
                    .is_ok_and(|sig| k.verify(input, &sig).is_ok())
            }
            (PublicKey::Ec(k), Alg::Es256) => p256::ecdsa::Signature::from_slice(&self.signature)
                .is_ok_and(|sig| k.verify(input, &sig).is_ok()),
            _ => false,
        }
    }
}

/// A public key of an issuer's JWKS that can verify one of the allowed algorithms.
#[derive(Clone)]
pub struct Jwk {
    pub kid: Option<String>,
    key: PublicKey,
}

#[derive(Clone)]
enum PublicKey {
    Rsa(rsa::pkcs1v15::VerifyingKey<rsa::sha2::Sha256>),
    Ec(p256::ecdsa::VerifyingKey),
}

impl Jwk {
    pub fn alg(&self) -> Alg {
        match self.key {
            PublicKey::Rsa(_) => Alg::Rs256,
            PublicKey::Ec(_) => Alg::Es256,
        }
    }
}

impl std::fmt::Debug for Jwk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Jwk({:?}, {:?})", self.kid, self.alg())
    }
}

fn field<'a>(key: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    key.get(name).and_then(Value::as_str)
}

fn bytes(key: &Map<String, Value>, name: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(field(key, name)?).ok()
}

fn rsa_key(key: &Map<String, Value>) -> Option<PublicKey> {
    let n = rsa::BigUint::from_bytes_be(&bytes(key, "n")?);
    let e = rsa::BigUint::from_bytes_be(&bytes(key, "e")?);
    let public = rsa::RsaPublicKey::new(n, e).ok()?;
    (public.size() * 8 >= MIN_RSA_BITS)
        .then(|| PublicKey::Rsa(rsa::pkcs1v15::VerifyingKey::new(public)))
}

fn ec_key(key: &Map<String, Value>) -> Option<PublicKey> {
    if field(key, "crv")? != "P-256" {
        return None;
    }
    let (x, y) = (bytes(key, "x")?, bytes(key, "y")?);
    if x.len() != 32 || y.len() != 32 {
        return None;
    }
    let point = p256::EncodedPoint::from_affine_coordinates(
        p256::FieldBytes::from_slice(&x),
        p256::FieldBytes::from_slice(&y),
        false,
    );
    p256::ecdsa::VerifyingKey::from_encoded_point(&point)
        .ok()
        .map(PublicKey::Ec)
}

/// One JWK, when it is a signing key of an allowed algorithm.
fn usable(key: &Value) -> Option<Jwk> {
    let key = key.as_object()?;
    if field(key, "use").is_some_and(|u| u != "sig") {
        return None;
    }
    let public = match field(key, "kty")? {
        "RSA" => rsa_key(key)?,
        "EC" => ec_key(key)?,
        _ => return None,
    };
    let jwk = Jwk {
        kid: field(key, "kid").map(str::to_string),
        key: public,
    };
    // A key that names its algorithm is used for that one only.
    match field(key, "alg") {
        Some(alg) if Alg::parse(alg) != Some(jwk.alg()) => None,
        _ => Some(jwk),
    }
}

/// The usable keys of a JWKS document (`{"keys": [...]}`); keys of other types are skipped.
pub fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, String> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|_| "the issuer's JWKS is not JSON".to_string())?;
    let keys = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or_else(|| "the issuer's JWKS has no keys array".to_string())?;
    Ok(keys.iter().filter_map(usable).take(MAX_KEYS).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer;
    use serde_json::json;

    fn b64(v: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(v)
    }

    fn es256() -> (p256::ecdsa::SigningKey, Value) {
        let key = p256::ecdsa::SigningKey::from_bytes(&[7u8; 32].into()).unwrap();
        let point = key.verifying_key().to_encoded_point(false);
        let jwk = json!({"kty": "EC", "crv": "P-256", "kid": "k1",
            "x": b64(point.x().unwrap()), "y": b64(point.y().unwrap())});
        (key, jwk)
    }

    fn token(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = sign(input.as_bytes());
        format!("{input}.{}", b64(&sig))
    }

    #[test]
    fn es256_tokens_verify_with_their_key_only() {
        let (key, jwk) = es256();
        let keys = parse_jwks(json!({"keys": [jwk]}).to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        let sign = |m: &[u8]| {
            let s: p256::ecdsa::Signature = key.sign(m);
            s.to_bytes().to_vec()
        };
        let t = token(
            &json!({"alg": "ES256", "kid": "k1"}),
            &json!({"sub": "x"}),
            sign,
        );
        let jws = parse(&t).unwrap();
        assert_eq!((jws.alg, jws.kid.as_deref()), (Alg::Es256, Some("k1")));
        assert!(jws.verify(&keys[0]));
        // The same signature over other claims.
        let other = token(
            &json!({"alg": "ES256", "kid": "k1"}),
            &json!({"sub": "y"}),
            sign,
        );
        let (other_input, _) = other.rsplit_once('.').unwrap();
        let (_, sig) = t.rsplit_once('.').unwrap();
        let forged = format!("{other_input}.{sig}");
        assert!(!parse(&forged).unwrap().verify(&keys[0]));
    }

    #[test]
    fn refused_algorithms_and_shapes() {
        let claims = json!({"sub": "x"});
        for alg in ["none", "HS256", "RS512", "PS256", "ES384", "EdDSA"] {
            let t = token(&json!({"alg": alg}), &claims, |_| vec![1, 2, 3]);
            let err = parse(&t).err().unwrap();
            assert!(err.contains("alg"), "{alg}: {err}");
        }
        assert!(parse("a.b").is_err());
        assert!(parse("a.b.c.d").is_err());
        assert!(parse(&"a".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        let crit = token(
            &json!({"alg": "ES256", "crit": ["b64"]}),
            &claims,
            |_| vec![],
        );
        assert!(parse(&crit).is_err());
    }

    #[test]
    fn jwks_keep_only_signing_keys_of_allowed_kinds() {
        let (_, jwk) = es256();
        let mut enc = jwk.clone();
        enc["use"] = json!("enc");
        let mut wrong_alg = jwk.clone();
        wrong_alg["alg"] = json!("RS256");
        let mut other_curve = jwk.clone();
        other_curve["crv"] = json!("P-384");
        let oct = json!({"kty": "oct", "k": "c2VjcmV0"});
        let small_rsa = json!({"kty": "RSA", "n": b64(&[0xff; 128]), "e": "AQAB"});
        let doc = json!({"keys": [enc, wrong_alg, other_curve, oct, small_rsa, jwk]});
        let keys = parse_jwks(doc.to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 1);
        assert!(parse_jwks(b"{}").is_err());
    }
}

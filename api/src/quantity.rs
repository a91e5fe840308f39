//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`), parsed and compared exactly the
//! way `k8s.io/apimachinery/pkg/api/resource.ParseQuantity` reads them, for
//! [`crate::validate`] (the CRD checks the same with CEL's `isQuantity`/`quantity`).
//!
//! Grammar (apimachinery's):
//! `<sign>? (<digits> | <digits>.<digits>? | .<digits>) <suffix>`, where `<suffix>` is empty,
//! a binary SI suffix (`Ki` `Mi` `Gi` `Ti` `Pi` `Ei`), a decimal SI suffix (`n` `u` `m` `k` `M`
//! `G` `T` `P` `E`) or a decimal exponent (`e`/`E` and a signed integer).

use std::cmp::Ordering;

/// An exact quantity: `mantissa × 10^exp10`.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    mantissa: i128,
    exp10: i32,
}

/// Longest number part accepted (digits): apimachinery keeps 64-bit precision at most, and
/// this keeps the exact arithmetic in range.
const MAX_DIGITS: usize = 30;

impl Quantity {
    /// Parses `s`.
    ///
    /// # Errors
    /// A one-line reason when `s` is not a quantity.
    pub fn parse(s: &str) -> Result<Quantity, &'static str> {
        let (negative, rest) = match s.as_bytes().first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty() {
            return Err("expected a number");
        }
        if frac.contains('.') {
            return Err("more than one decimal point");
        }
        let digits = format!("{int}{frac}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_DIGITS {
            return Err("too many digits");
        }
        let mut mantissa: i128 =
            if digits.is_empty() { 0 } else { digits.parse().map_err(|_| "bad number")? };
        let mut exp10 = -(frac.len() as i32);
        match suffix {
            "" => {}
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let power =
                    1 + ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].iter().position(|x| *x == suffix).unwrap_or(0);
                for _ in 0..power {
                    mantissa = mantissa.checked_mul(1024).ok_or("too large")?;
                }
            }
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            _ => {
                let exp = suffix.strip_prefix(['e', 'E']).ok_or("unknown suffix")?;
                let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4 {
                    return Err("bad exponent");
                }
                exp10 += exp.parse::<i32>().map_err(|_| "bad exponent")?;
            }
        }
        Ok(Quantity { mantissa: if negative { -mantissa } else { mantissa }, exp10 })
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |m: i128| m.signum();
        if sign(self.mantissa) != sign(other.mantissa) || self.mantissa == 0 {
            return sign(self.mantissa).cmp(&sign(other.mantissa));
        }
        // Same sign, non-zero: scale the one with the larger exponent down to the other's.
        let (hi, lo, flipped) =
            if self.exp10 >= other.exp10 { (self, other, false) } else { (other, self, true) };
        let mut scaled = Some(hi.mantissa);
        for _ in 0..(hi.exp10 - lo.exp10) {
            scaled = scaled.and_then(|m| m.checked_mul(10));
        }
        let ord = match scaled {
            Some(m) => m.cmp(&lo.mantissa),
            // Overflow: |hi| is larger than any i128 mantissa.
            None => {
                if hi.mantissa > 0 {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
        };
        if flipped { ord.reverse() } else { ord }
    }
}

#[cfg(test)]
mod tests {
    use super::Quantity;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_what_apimachinery_accepts() {
        for s in [
            "1", "0", "500m", "1.5", ".5", "5.", "1Gi", "128Mi", "2k", "1e3", "1E-3", "+1", "-1", "0.1n",
            "1Ei",
        ] {
            q(s);
        }
    }

    #[test]
    fn rejects_what_apimachinery_rejects() {
        for s in ["abc", "", "1.2.3", "1KB", "Mi", "1 Gi", "1e", "1e+", "m", ".", "--1", "1ki", "1e3Mi"] {
            assert!(Quantity::parse(s).is_err(), "{s} accepted");
        }
    }

    #[test]
    fn compares_exactly_across_suffixes() {
        assert_eq!(q("100m"), q("0.1"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1k"), q("1e3"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("500m") < q("1"));
        assert!(q("-1") < q("0"));
        assert!(q("1E") > q("1n"));
        assert!(q("-2") < q("-1"));
    }
}

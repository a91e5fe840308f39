//! The [`Validator`] that collects violations, and its checks of one value (lengths, ranges,
//! ports, enumerations, list sizes, Secret names), which every rule family uses. It holds
//! no rule about an Interconnect: those are [`super::fields`], [`super::unique`],
//! [`super::generated`] and [`super::sizes`].

use std::fmt;

use serde_json::Value;

use crate::messages as msg;

use super::field_error::{ErrorType, FieldError};
use super::names::{is_config_safe, is_dns_subdomain};

#[derive(Default)]
pub(super) struct Validator {
    pub(super) errors: Vec<FieldError>,
}

/// Whether an optional list has at least one item.
pub(super) fn nonempty<T>(list: &Option<Vec<T>>) -> bool {
    list.as_ref().is_some_and(|l| !l.is_empty())
}

pub(super) fn supported_list(values: &[&str]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    format!("supported values: {}", quoted.join(", "))
}

impl Validator {
    /// Records a violation; `field` is formatted only here, so a path costs nothing until
    /// something at it is wrong.
    pub(super) fn push(
        &mut self,
        field: impl fmt::Display,
        t: ErrorType,
        value: Option<Value>,
        detail: impl Into<String>,
    ) {
        self.errors.push(FieldError::new(field.to_string(), t, value, detail));
    }

    /// Length bounds and, for config values (`config`), the character rule.
    pub(super) fn string(&mut self, path: impl fmt::Display + Copy, s: &str, max: usize, config: bool) {
        if s.is_empty() {
            self.push(path, ErrorType::Invalid, Some(s.into()), "must not be empty");
        } else if s.chars().count() > max {
            self.push(path, ErrorType::TooLong, None, format!("may not be more than {max} characters"));
        }
        if config && !is_config_safe(s) {
            self.push(path, ErrorType::Invalid, Some(s.into()), msg::CONFIG_NUL);
        }
    }

    pub(super) fn opt_string(
        &mut self,
        path: impl fmt::Display + Copy,
        s: &Option<String>,
        max: usize,
        config: bool,
    ) {
        if let Some(s) = s {
            self.string(path, s, max, config);
        }
    }

    pub(super) fn secret_name(&mut self, path: impl fmt::Display + Copy, s: &Option<String>) {
        if let Some(s) = s {
            self.string(path, s, 253, false);
            if !s.is_empty() && s.len() <= 253 && !is_dns_subdomain(s) {
                self.push(
                    path,
                    ErrorType::Invalid,
                    Some(s.as_str().into()),
                    "must be a Secret name: lowercase letters, digits, '-' and '.', starting and ending with a \
                     letter or digit",
                );
            }
        }
    }

    pub(super) fn range(&mut self, path: impl fmt::Display + Copy, v: Option<i32>, min: i32, max: i32) {
        if let Some(v) = v
            && !(min..=max).contains(&v)
        {
            self.push(
                path,
                ErrorType::Invalid,
                Some(v.into()),
                format!("must be between {min} and {max}, inclusive"),
            );
        }
    }

    pub(super) fn port(&mut self, path: impl fmt::Display + Copy, port: i32) {
        if port == 0 {
            self.push(path, ErrorType::Required, None, "a port between 1 and 65535 is required");
        } else {
            self.range(path, Some(port), 1, 65535);
        }
    }

    pub(super) fn enumeration(
        &mut self,
        path: impl fmt::Display + Copy,
        value: &str,
        supported: bool,
        values: &[&str],
        hint: &str,
    ) {
        if !supported {
            let mut detail = supported_list(values);
            if !hint.is_empty() {
                detail.push_str(hint);
            }
            self.push(path, ErrorType::NotSupported, Some(value.into()), detail);
        }
    }

    pub(super) fn max_items<T>(&mut self, path: impl fmt::Display, list: &Option<Vec<T>>, max: usize) {
        if let Some(l) = list
            && l.len() > max
        {
            self.push(
                path,
                ErrorType::TooMany,
                Some(l.len().into()),
                format!("must have at most {max} items"),
            );
        }
    }
}

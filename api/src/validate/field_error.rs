//! The shape of a violation: [`FieldError`] (an apimachinery `field.Error`: path, type, bad
//! value, detail) and [`At`], the path of a list item. It judges nothing: the rules are the
//! sibling modules'.

use std::fmt;

use serde_json::Value;

/// The kind of a field error, as in `k8s.io/apimachinery/pkg/util/validation/field`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// A required field is absent or empty.
    Required,
    /// A value is malformed or out of range.
    Invalid,
    /// A value that must be unique is repeated.
    Duplicate,
    /// A value is not one of the supported values.
    NotSupported,
    /// A field may not be set in this context.
    Forbidden,
    /// A list has more items than allowed.
    TooMany,
    /// A string is longer than allowed.
    TooLong,
}

impl ErrorType {
    /// The `reason` of a `metav1.StatusCause` (`FieldValueInvalid`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }

    /// The text apimachinery prints for the type (`Invalid value`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooMany => "Too many",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// Longest offending value a message shows, in characters (of its JSON text).
pub const MAX_SHOWN_VALUE: usize = 256;

/// One violation: where, what kind, the offending value and what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Path of the field, e.g. `spec.listeners[1].port`.
    pub field: String,
    /// The kind of violation.
    pub error_type: ErrorType,
    /// The offending value, when the type shows one (Invalid, Duplicate, NotSupported, TooMany).
    pub bad_value: Option<Value>,
    /// What is wrong and how to fix it.
    pub detail: String,
}

impl FieldError {
    pub(crate) fn new(
        field: String,
        error_type: ErrorType,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError { field, error_type, bad_value, detail: detail.into() }
    }

    /// The message without the field path: `Invalid value: 70000: must be ...`, as
    /// apimachinery's `ErrorBody` prints it. A value longer than [`MAX_SHOWN_VALUE`]
    /// characters is cut there and ends with `…`, so a huge offending value cannot make a
    /// huge message.
    pub fn body(&self) -> String {
        let mut s = self.error_type.as_str().to_string();
        let show_value = matches!(
            self.error_type,
            ErrorType::Invalid | ErrorType::Duplicate | ErrorType::NotSupported | ErrorType::TooMany
        );
        if let (true, Some(v)) = (show_value, &self.bad_value) {
            s.push_str(": ");
            let shown = v.to_string();
            if shown.chars().count() > MAX_SHOWN_VALUE {
                s.extend(shown.chars().take(MAX_SHOWN_VALUE));
                s.push('…');
            } else {
                s.push_str(&shown);
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// The path of an item of a list, `spec.<list>[<index>]`, with an optional field after it
/// (`.<field>`): formatted only when a violation is reported at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct At<'a> {
    list: &'a str,
    index: usize,
    field: &'static str,
}

impl<'a> At<'a> {
    pub(crate) fn new(list: &'a str, index: usize) -> Self {
        At { list, index, field: "" }
    }

    /// This item's `field`.
    pub(crate) fn field(self, field: &'static str) -> Self {
        At { field, ..self }
    }

    /// The path without the leading `spec.` (how a detail names another field).
    pub(crate) fn relative(self) -> String {
        let full = self.to_string();
        full.trim_start_matches("spec.").to_string()
    }
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spec.{}[{}]", self.list, self.index)?;
        if !self.field.is_empty() {
            write!(f, ".{}", self.field)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod shown_value_tests {
    use super::*;

    #[test]
    fn long_offending_values_are_cut_in_messages() {
        let e = |v: &str| FieldError::new("spec.users".into(), ErrorType::Invalid, Some(v.into()), "d");
        assert_eq!(e("abc").body(), r#"Invalid value: "abc": d"#);
        let long = e(&"x".repeat(3 * 1024 * 1024)).body();
        assert!(long.chars().count() < MAX_SHOWN_VALUE + 40, "{} characters", long.len());
        assert!(long.starts_with(r#"Invalid value: "xxx"#) && long.ends_with("…: d"), "{long:.80}");
    }
}

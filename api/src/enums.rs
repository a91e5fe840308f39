//! String enums that keep values outside their supported set.
//!
//! A spec field such as `placement: Node` must reach [`crate::validate`] so that it is
//! reported with its path next to every other problem, instead of failing the whole
//! decode. Each enum therefore has an `Unsupported(String)` variant that holds the value
//! verbatim and serializes back unchanged; its JSON schema lists only the supported values,
//! so the API server rejects the rest with `Unsupported value`.

macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value outside the supported set, kept verbatim so validation can name it.
            Unsupported(String),
        }

        impl $name {
            /// The values the API accepts, in the order the schema lists them.
            pub const SUPPORTED: &'static [&'static str] = &[$($text),+];

            /// The JSON string of this value.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Unsupported(s) => s,
                }
            }

            /// Whether this is one of [`Self::SUPPORTED`].
            pub fn is_supported(&self) -> bool {
                !matches!(self, Self::Unsupported(_))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $( $text => Self::$variant, )+
                    other => Self::Unsupported(other.to_string()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Ok(Self::from(s.as_ref()))
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "enum": [$($text),+] })
            }
        }
    };
}

pub(crate) use string_enum;

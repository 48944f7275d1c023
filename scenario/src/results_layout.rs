//! The layout of `results.json`: objects indented one key per line, an array of scalars (a run's
//! per-GPU shares, a histogram's counts) on one line, an array of objects or arrays one element
//! per line. serde_json's pretty layout put every number of every series on its own indented
//! line, which made a sweep's file about five times its compact size (315 MB for Chimera's
//! systems grid) and its writing a measurable part of `reproduce`.

use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};
use std::io::{self, Write};

/// The bytes of `value` in the results layout (no trailing newline).
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(4096);
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, Layout::default());
    value.serialize(&mut serializer)?;
    Ok(bytes)
}

/// How an open array lays out its elements.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Array {
    /// No element yet: its first element decides.
    Open,
    /// Its first element was a scalar: every element on the array's line.
    Inline,
    /// Its first element was an object or array: one element per line.
    Broken,
}

/// What starts at the next write: the first token of an array element decides the array's layout.
#[derive(Clone, Copy, PartialEq)]
enum Token {
    Scalar,
    Container,
}

#[derive(Default)]
struct Layout {
    /// Indentation depth of the broken containers open.
    depth: usize,
    /// Open inline arrays (and everything inside them is written on one line).
    inline: usize,
    /// The open arrays, innermost last.
    arrays: Vec<Array>,
    /// An element of the innermost array starts at the next token: whether it is the first.
    element: Option<bool>,
    /// For each open object outside inline arrays: whether it has a key yet.
    objects: Vec<bool>,
}

impl Layout {
    fn newline<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }

    /// Writes what goes before an array element once its first token is known.
    fn start<W: ?Sized + Write>(&mut self, w: &mut W, token: Token) -> io::Result<()> {
        let Some(first) = self.element.take() else {
            return Ok(());
        };
        let array = self
            .arrays
            .last_mut()
            .expect("an element is inside an array");
        if *array == Array::Open {
            *array = match token {
                Token::Scalar => Array::Inline,
                Token::Container => Array::Broken,
            };
            match *array {
                Array::Inline => self.inline += 1,
                _ => self.depth += 1,
            }
        }
        match *array {
            Array::Inline => {
                if !first {
                    w.write_all(b", ")?;
                }
                Ok(())
            }
            _ => {
                if !first {
                    w.write_all(b",")?;
                }
                self.newline(w)
            }
        }
    }
}

impl Formatter for Layout {
    fn write_null<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_null(w)
    }
    fn write_bool<W: ?Sized + Write>(&mut self, w: &mut W, value: bool) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_bool(w, value)
    }
    fn write_i8<W: ?Sized + Write>(&mut self, w: &mut W, value: i8) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_i8(w, value)
    }
    fn write_i16<W: ?Sized + Write>(&mut self, w: &mut W, value: i16) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_i16(w, value)
    }
    fn write_i32<W: ?Sized + Write>(&mut self, w: &mut W, value: i32) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_i32(w, value)
    }
    fn write_i64<W: ?Sized + Write>(&mut self, w: &mut W, value: i64) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_i64(w, value)
    }
    fn write_i128<W: ?Sized + Write>(&mut self, w: &mut W, value: i128) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_i128(w, value)
    }
    fn write_u8<W: ?Sized + Write>(&mut self, w: &mut W, value: u8) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_u8(w, value)
    }
    fn write_u16<W: ?Sized + Write>(&mut self, w: &mut W, value: u16) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_u16(w, value)
    }
    fn write_u32<W: ?Sized + Write>(&mut self, w: &mut W, value: u32) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_u32(w, value)
    }
    fn write_u64<W: ?Sized + Write>(&mut self, w: &mut W, value: u64) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_u64(w, value)
    }
    fn write_u128<W: ?Sized + Write>(&mut self, w: &mut W, value: u128) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_u128(w, value)
    }
    fn write_f32<W: ?Sized + Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_f32(w, value)
    }
    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_f64(w, value)
    }
    fn write_number_str<W: ?Sized + Write>(&mut self, w: &mut W, value: &str) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.write_number_str(w, value)
    }
    fn begin_string<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        CompactFormatter.begin_string(w)
    }
    fn write_char_escape<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        CompactFormatter.write_char_escape(w, escape)
    }
    fn write_byte_array<W: ?Sized + Write>(&mut self, w: &mut W, value: &[u8]) -> io::Result<()> {
        self.start(w, Token::Container)?;
        self.begin_array(w)?;
        for (i, byte) in value.iter().enumerate() {
            self.begin_array_value(w, i == 0)?;
            self.write_u8(w, *byte)?;
            self.end_array_value(w)?;
        }
        self.end_array(w)
    }
    fn write_raw_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        self.start(w, Token::Scalar)?;
        w.write_all(fragment.as_bytes())
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.start(w, Token::Container)?;
        self.arrays.push(match self.inline {
            0 => Array::Open,
            _ => {
                self.inline += 1;
                Array::Inline
            }
        });
        w.write_all(b"[")
    }
    fn begin_array_value<W: ?Sized + Write>(&mut self, _w: &mut W, first: bool) -> io::Result<()> {
        self.element = Some(first);
        Ok(())
    }
    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        Ok(())
    }
    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        match self.arrays.pop().expect("an array ends after it began") {
            Array::Open => {}
            Array::Inline => self.inline -= 1,
            Array::Broken => {
                self.depth -= 1;
                self.newline(w)?;
            }
        }
        w.write_all(b"]")
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.start(w, Token::Container)?;
        if self.inline == 0 {
            self.depth += 1;
            self.objects.push(false);
        }
        w.write_all(b"{")
    }
    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        match self.inline {
            0 => {
                *self.objects.last_mut().expect("a key is inside an object") = true;
                self.newline(w)
            }
            _ if first => Ok(()),
            _ => w.write_all(b" "),
        }
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.inline == 0 {
            self.depth -= 1;
            if self.objects.pop().expect("an object ends after it began") {
                self.newline(w)?;
            }
        }
        w.write_all(b"}")
    }
}

#[cfg(test)]
mod tests {
    use super::to_vec;
    use serde_json::json;

    fn text(value: &serde_json::Value) -> String {
        String::from_utf8(to_vec(value).unwrap()).unwrap()
    }

    #[test]
    fn scalar_arrays_stay_on_one_line_and_containers_break() {
        let value = json!({
            "seed": 1,
            "shares": [0.25, 0.5],
            "empty": [],
            "none": {},
            "series": [[0.0, 0], [0.8, 97]],
            "runs": [{"a": "x", "b": [1, {"c": null}]}],
            "mixed": [1, [2, 3], {"d": true}],
        });
        let expected = r#"{
  "empty": [],
  "mixed": [1, [2, 3], {"d": true}],
  "none": {},
  "runs": [
    {
      "a": "x",
      "b": [1, {"c": null}]
    }
  ],
  "seed": 1,
  "series": [
    [0.0, 0],
    [0.8, 97]
  ],
  "shares": [0.25, 0.5]
}"#;
        assert_eq!(text(&value), expected);
    }

    #[test]
    fn the_layout_reads_back_to_the_same_value() {
        let value = json!({
            "escaped": "tab\t \"quoted\" \u{1}",
            "floats": [1e-300, -0.0, 1.5, 123456789.125],
            "nested": [[[]], [{}], [[1], [2.5]]],
            "objects": [{"x": [[1, 2]]}, {"y": {"z": []}}],
            "top": [],
        });
        let bytes = to_vec(&value).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, value);
        // The numbers are written as the compact writer writes them.
        assert!(
            String::from_utf8(bytes)
                .unwrap()
                .contains("[1e-300, -0.0, 1.5, 123456789.125]")
        );
    }
}

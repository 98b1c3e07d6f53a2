//! A JPEG decoder whose pixels match libjpeg-turbo's default decompression bit for bit: ONNX's
//! reference ImageDecoder decodes with Pillow, which uses libjpeg-turbo, and general decoders
//! (the `image` crate's included) differ from it by a level or two in a quarter of the samples.
//! It reads Huffman-coded 8-bit frames, sequential or progressive, with one (gray) or three
//! components; everything else (arithmetic coding, 12-bit samples, CMYK, lossless) is left to
//! the caller's general decoder.

mod entropy;
mod idct;
mod output;

use super::MAX_PIXELS;
use entropy::{Huffman, ZIGZAG};

/// A decoded image, `[height][width][channels]`.
#[derive(Debug)]
pub(super) struct Decoded {
    pub width: usize,
    pub height: usize,
    /// 1 (gray) or 3 (RGB).
    pub channels: usize,
    pub pixels: Vec<u8>,
}

/// How the components' samples map to output colours (libjpeg's rules for `jpeg_color_space`).
#[derive(Clone, Copy, PartialEq, Debug)]
enum ColorSpace {
    Gray,
    YCbCr,
    Rgb,
}

/// One component of the frame with its coefficients, stored for whole MCUs.
struct Component {
    id: u8,
    h: usize,
    v: usize,
    quant_table: usize,
    /// The quantization table in natural order, taken when the component's first scan starts.
    quant: Option<[u16; 64]>,
    blocks_w: usize,
    blocks_h: usize,
    coefs: Vec<[i16; 64]>,
}

/// The frame header (SOF) and the coefficients decoded so far.
struct Frame {
    width: usize,
    height: usize,
    progressive: bool,
    max_h: usize,
    max_v: usize,
    mcus_x: usize,
    mcus_y: usize,
    comps: Vec<Component>,
}

impl Frame {
    /// Component `c`'s size in samples (libjpeg's `downsampled_width` and `_height`).
    fn sampled_size(&self, c: usize) -> (usize, usize) {
        let comp = &self.comps[c];
        ((self.width * comp.h).div_ceil(self.max_h), (self.height * comp.v).div_ceil(self.max_v))
    }

    /// The blocks a scan of component `c` alone covers, across and down.
    fn scan_blocks(&self, c: usize) -> (usize, usize) {
        let (w, h) = self.sampled_size(c);
        (w.div_ceil(8), h.div_ceil(8))
    }
}

/// One component of a scan and its Huffman tables.
struct ScanComponent {
    component: usize,
    dc_table: usize,
    ac_table: usize,
}

/// A scan header (SOS).
struct Scan {
    comps: Vec<ScanComponent>,
    ss: usize,
    se: usize,
    ah: u32,
    al: u32,
}

/// The decoder's state between markers.
#[derive(Default)]
struct Decoder {
    quant: [Option<[u16; 64]>; 4],
    dc: [Option<Huffman>; 4],
    ac: [Option<Huffman>; 4],
    restart_interval: usize,
    frame: Option<Frame>,
    jfif: bool,
    adobe_transform: Option<u8>,
    scans: usize,
}

fn be16(b: &[u8]) -> usize {
    usize::from(b[0]) << 8 | usize::from(b[1])
}

/// Decodes `bytes` if it is a JPEG this decoder reads; `Err` says why not (not a JPEG, a
/// feature left to the general decoder, or damaged data).
pub(super) fn decode(bytes: &[u8]) -> Result<Decoded, String> {
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return Err("not a JPEG".into());
    }
    let mut d = Decoder::default();
    let mut pos = 2;
    loop {
        let (marker, at) = next_marker(bytes, pos).ok_or("no end of image marker")?;
        pos = at + 2;
        match marker {
            0xD9 => break,
            0xD0..=0xD7 | 0x01 => continue,
            0xDA => {
                let len = segment_len(bytes, pos)?;
                pos += len;
                pos += d.scan(&bytes[pos - len + 2..pos], &bytes[pos..])?;
                continue;
            }
            _ => {}
        }
        let len = segment_len(bytes, pos)?;
        let body = &bytes[pos + 2..pos + len];
        pos += len;
        match marker {
            0xC0..=0xC2 => d.frame(body, marker == 0xC2)?,
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                return Err(format!("a JPEG coding process this decoder does not read (SOF{})", marker - 0xC0))
            }
            0xC4 => d.huffman_tables(body)?,
            0xDB => d.quant_tables(body)?,
            0xDD if body.len() >= 2 => d.restart_interval = be16(body),
            0xE0 if body.starts_with(b"JFIF\0") => d.jfif = true,
            0xEE if body.starts_with(b"Adobe") && body.len() >= 12 => d.adobe_transform = Some(body[11]),
            _ => {}
        }
    }
    d.finish()
}

/// The next marker at or after `pos`: its code and where its 0xFF is. Skips entropy-coded
/// bytes, stuffed zeros, fill bytes and restart markers.
fn next_marker(bytes: &[u8], mut pos: usize) -> Option<(u8, usize)> {
    while pos + 1 < bytes.len() {
        if bytes[pos] == 0xFF && !matches!(bytes[pos + 1], 0 | 0xFF | 0xD0..=0xD7) {
            return Some((bytes[pos + 1], pos));
        }
        pos += 1;
    }
    None
}

/// The length of the segment whose length field is at `pos`, checked to fit in `bytes`.
fn segment_len(bytes: &[u8], pos: usize) -> Result<usize, String> {
    let len = bytes.get(pos..pos + 2).map(be16).ok_or("a segment cut short")?;
    if len < 2 || pos + len > bytes.len() {
        return Err("a segment longer than the data".into());
    }
    Ok(len)
}

impl Decoder {
    /// SOF0/1/2: the frame's size and components.
    fn frame(&mut self, b: &[u8], progressive: bool) -> Result<(), String> {
        if self.frame.is_some() {
            return Err("a second frame header".into());
        }
        if b.len() < 6 || b[0] != 8 {
            return Err(format!("a frame of {} bits per sample (this decoder reads 8)", b.first().unwrap_or(&0)));
        }
        let (height, width, count) = (be16(&b[1..]), be16(&b[3..]), usize::from(b[5]));
        if width == 0 || height == 0 || width * height > MAX_PIXELS {
            return Err(format!("a frame of {width}x{height} pixels"));
        }
        if !matches!(count, 1 | 3) || b.len() < 6 + 3 * count {
            return Err(format!("a frame of {count} components (this decoder reads 1 or 3)"));
        }
        let mut comps = Vec::with_capacity(count);
        for c in b[6..6 + 3 * count].chunks_exact(3) {
            let (h, v, tq) = (usize::from(c[1] >> 4), usize::from(c[1] & 15), usize::from(c[2]));
            if !(1..=4).contains(&h) || !(1..=4).contains(&v) || tq > 3 {
                return Err(format!("component {} with sampling {h}x{v}, table {tq}", c[0]));
            }
            let comp =
                Component { id: c[0], h, v, quant_table: tq, quant: None, blocks_w: 0, blocks_h: 0, coefs: vec![] };
            comps.push(comp);
        }
        if count == 1 {
            // A single component is one block per MCU whatever its sampling factors say.
            (comps[0].h, comps[0].v) = (1, 1);
        }
        let max_h = comps.iter().map(|c| c.h).max().unwrap_or(1);
        let max_v = comps.iter().map(|c| c.v).max().unwrap_or(1);
        let (mcus_x, mcus_y) = (width.div_ceil(8 * max_h), height.div_ceil(8 * max_v));
        for c in &mut comps {
            (c.blocks_w, c.blocks_h) = (mcus_x * c.h, mcus_y * c.v);
            c.coefs = vec![[0; 64]; c.blocks_w * c.blocks_h];
        }
        self.frame = Some(Frame { width, height, progressive, max_h, max_v, mcus_x, mcus_y, comps });
        Ok(())
    }

    /// DHT: one or more Huffman tables.
    fn huffman_tables(&mut self, mut b: &[u8]) -> Result<(), String> {
        while !b.is_empty() {
            let (class, id) = (b[0] >> 4, usize::from(b[0] & 15));
            let counts: &[u8; 16] = b.get(1..17).and_then(|c| c.try_into().ok()).ok_or("a Huffman table cut short")?;
            let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
            let symbols = b.get(17..17 + total).ok_or("a Huffman table cut short")?;
            if class > 1 || id > 3 || total > 256 {
                return Err(format!("Huffman table class {class} id {id} with {total} codes"));
            }
            let table = Some(Huffman::new(counts, symbols)?);
            if class == 0 {
                self.dc[id] = table;
            } else {
                self.ac[id] = table;
            }
            b = &b[17 + total..];
        }
        Ok(())
    }

    /// DQT: one or more quantization tables, stored in natural order.
    fn quant_tables(&mut self, mut b: &[u8]) -> Result<(), String> {
        while !b.is_empty() {
            let (wide, id) = (b[0] >> 4 == 1, usize::from(b[0] & 15));
            let size = if wide { 128 } else { 64 };
            let values = b.get(1..1 + size).ok_or("a quantization table cut short")?;
            if b[0] >> 4 > 1 || id > 3 {
                return Err(format!("quantization table {id} of precision {}", b[0] >> 4));
            }
            let mut table = [0u16; 64];
            for (k, &z) in ZIGZAG[..64].iter().enumerate() {
                table[z] = if wide { be16(&values[2 * k..]) as u16 } else { u16::from(values[k]) };
            }
            self.quant[id] = Some(table);
            b = &b[1 + size..];
        }
        Ok(())
    }

    /// SOS: decodes the scan whose header is `header` and whose data starts `data`; returns
    /// how many bytes of `data` it read.
    fn scan(&mut self, header: &[u8], data: &[u8]) -> Result<usize, String> {
        let frame = self.frame.as_mut().ok_or("a scan before the frame header")?;
        let count = usize::from(*header.first().ok_or("an empty scan header")?);
        if !(1..=4).contains(&count) || header.len() < 4 + 2 * count {
            return Err(format!("a scan header of {count} components"));
        }
        let mut comps = Vec::with_capacity(count);
        for c in header[1..1 + 2 * count].chunks_exact(2) {
            let component = frame
                .comps
                .iter()
                .position(|f| f.id == c[0])
                .ok_or(format!("a scan of component {}, not in the frame", c[0]))?;
            let comp = &mut frame.comps[component];
            if comp.quant.is_none() {
                comp.quant = Some(
                    self.quant[comp.quant_table].ok_or(format!("quantization table {} undefined", comp.quant_table))?,
                );
            }
            comps.push(ScanComponent { component, dc_table: usize::from(c[1] >> 4), ac_table: usize::from(c[1] & 15) });
        }
        let s = &header[1 + 2 * count..];
        let scan = Scan { comps, ss: s[0].into(), se: s[1].into(), ah: (s[2] >> 4).into(), al: (s[2] & 15).into() };
        let bad = if frame.progressive {
            scan.se > 63
                || scan.ss > scan.se
                || (scan.ss == 0) != (scan.se == 0)
                || (scan.ss > 0 && count > 1)
                || scan.al > 13
        } else {
            scan.ss != 0 || scan.se != 63 || scan.ah != 0 || scan.al != 0
        };
        if bad || scan.comps.iter().any(|c| c.dc_table > 3 || c.ac_table > 3) {
            return Err(format!(
                "a scan with spectral range {}..={} and bits {}/{}",
                scan.ss, scan.se, scan.ah, scan.al
            ));
        }
        self.scans += 1;
        entropy::decode_scan(frame, &scan, &self.dc, &self.ac, self.restart_interval, data)
    }

    /// After EOI: the pixels, in the colour space libjpeg infers from the markers and ids.
    fn finish(self) -> Result<Decoded, String> {
        let frame = self.frame.ok_or("no frame header")?;
        if self.scans == 0 {
            return Err("no scan".into());
        }
        let color = if frame.comps.len() == 1 {
            ColorSpace::Gray
        } else if self.jfif {
            ColorSpace::YCbCr
        } else if let Some(transform) = self.adobe_transform {
            if transform == 0 {
                ColorSpace::Rgb
            } else {
                ColorSpace::YCbCr
            }
        } else if frame.comps.iter().map(|c| c.id).eq(*b"RGB") {
            ColorSpace::Rgb
        } else {
            ColorSpace::YCbCr
        };
        let (pixels, channels) = output::pixels(&frame, color)?;
        Ok(Decoded { width: frame.width, height: frame.height, channels, pixels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::test_support::Rng;

    /// A 35x21 progressive 4:2:0 JPEG with restart markers that Pillow wrote, and Pillow's
    /// (libjpeg-turbo's) decoding of it.
    const PROGRESSIVE: &[u8] = include_bytes!("jpeg/testdata/progressive_restart.jpg");
    const PROGRESSIVE_RGB: &[u8] = include_bytes!("jpeg/testdata/progressive_restart.rgb");

    #[test]
    fn decodes_as_libjpeg_turbo_does() {
        let d = decode(PROGRESSIVE).unwrap();
        assert_eq!((d.width, d.height, d.channels), (35, 21, 3));
        assert!(d.pixels == PROGRESSIVE_RGB, "pixels differ from libjpeg-turbo's");
    }

    /// Damaged files (bytes changed, cut short) decode or fail cleanly, never panic.
    #[test]
    fn damaged_files_never_panic() {
        let mut rng = Rng::new(11);
        for case in 0..1000 {
            let mut bytes = PROGRESSIVE.to_vec();
            for _ in 0..1 + case % 4 {
                let at = rng.range(0, bytes.len() as i64) as usize;
                bytes[at] = rng.range(0, 256) as u8;
            }
            if case % 5 == 0 {
                bytes.truncate(rng.range(2, bytes.len() as i64) as usize);
            }
            if let Ok(d) = decode(&bytes) {
                assert_eq!(d.pixels.len(), d.width * d.height * d.channels, "case {case}");
            }
        }
    }

    #[test]
    fn features_left_to_the_general_decoder_are_errors_here() {
        let with_sof = |sof: &[u8]| [&[0xFF, 0xD8][..], sof, &[0xFF, 0xD9]].concat();
        // 12-bit samples, 4 components, arithmetic coding (SOF9).
        let twelve_bit = with_sof(&[0xFF, 0xC0, 0, 11, 12, 0, 8, 0, 8, 1, 1, 0x11, 0]);
        assert!(decode(&twelve_bit).unwrap_err().contains("12 bits"));
        let cmyk = with_sof(&[0xFF, 0xC0, 0, 20, 8, 0, 8, 0, 8, 4, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0]);
        assert!(decode(&cmyk).unwrap_err().contains("4 components"));
        let arithmetic = with_sof(&[0xFF, 0xC9, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
        assert!(decode(&arithmetic).unwrap_err().contains("SOF9"));
        assert!(decode(b"GIF89a").is_err());
    }
}

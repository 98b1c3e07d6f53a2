//! Huffman-coded scans: the bit reader, the code tables, and the coefficient decoding of
//! sequential scans and of the four kinds of progressive scan (DC and AC, first and refining),
//! with restart intervals. Damaged data decodes as libjpeg decodes it where that is cheap
//! (zeros past a marker reached early); a code no table holds is an error.

use super::{Frame, Scan};

/// `ZIGZAG[k]`: the natural-order index of the `k`-th coefficient in zigzag order, with 16
/// extra entries so that a run past the block's end lands on the last coefficient (libjpeg's
/// `jpeg_natural_order` does the same).
pub(super) const ZIGZAG: [usize; 80] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21,
    28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
];

/// Codes of up to this many bits are decoded by one table look-up.
const FAST_BITS: u32 = 9;

/// A Huffman table (DHT): canonical codes of 1 to 16 bits.
pub(super) struct Huffman {
    /// For each `FAST_BITS`-bit prefix: `length << 8 | symbol`, 0 when the code is longer.
    fast: Vec<u16>,
    /// Per code length: the largest code of that length (-1 when none).
    max_code: [i32; 17],
    /// Per code length: what to add to a code to get its index in `symbols`.
    offset: [i32; 17],
    symbols: Vec<u8>,
}

impl Huffman {
    /// The table of `counts[l - 1]` codes of each length `l` for `symbols` in code order.
    pub(super) fn new(counts: &[u8; 16], symbols: &[u8]) -> Result<Self, String> {
        let mut table =
            Huffman { fast: vec![0; 1 << FAST_BITS], max_code: [-1; 17], offset: [0; 17], symbols: symbols.to_vec() };
        let (mut code, mut k) = (0i32, 0usize);
        for len in 1..=16u32 {
            let count = counts[len as usize - 1] as usize;
            table.offset[len as usize] = k as i32 - code;
            for _ in 0..count {
                if code >= 1 << len {
                    return Err("a Huffman table with more codes than its lengths allow".into());
                }
                if len <= FAST_BITS {
                    let first = (code as usize) << (FAST_BITS - len);
                    let entry = (len as u16) << 8 | symbols[k] as u16;
                    table.fast[first..first + (1 << (FAST_BITS - len))].fill(entry);
                }
                code += 1;
                k += 1;
            }
            if count > 0 {
                table.max_code[len as usize] = code - 1;
            }
            code <<= 1;
        }
        Ok(table)
    }
}

/// Reads the entropy-coded bytes of a scan: removes stuffed zero bytes and stops at a marker,
/// after which it reads zeros, as libjpeg does.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    /// Bits not yet consumed, most significant first.
    acc: u64,
    count: u32,
    at_marker: bool,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8]) -> Self {
        Bits { data, pos: 0, acc: 0, count: 0, at_marker: false }
    }

    fn fill(&mut self) {
        while self.count <= 56 {
            let byte = if self.at_marker {
                0
            } else {
                match (self.data.get(self.pos), self.data.get(self.pos + 1)) {
                    (None, _) => {
                        self.at_marker = true;
                        0
                    }
                    (Some(0xFF), Some(0)) => {
                        self.pos += 2;
                        0xFF
                    }
                    (Some(0xFF), _) => {
                        self.at_marker = true;
                        0
                    }
                    (Some(&b), _) => {
                        self.pos += 1;
                        b
                    }
                }
            };
            self.acc |= (byte as u64) << (56 - self.count);
            self.count += 8;
        }
    }

    /// The next `n` (at most 16) bits as an unsigned number.
    fn bits(&mut self, n: u32) -> i32 {
        if n == 0 {
            return 0;
        }
        if self.count < n {
            self.fill();
        }
        let v = (self.acc >> (64 - n)) as i32;
        self.acc <<= n;
        self.count -= n;
        v
    }

    fn bit(&mut self) -> bool {
        self.bits(1) == 1
    }

    /// The next `n`-bit magnitude category value as a signed number (JPEG's `EXTEND`).
    fn signed(&mut self, n: u32) -> Result<i32, String> {
        if n > 16 {
            return Err(format!("a coefficient of {n} bits (at most 16)"));
        }
        let v = self.bits(n);
        Ok(if n > 0 && v < 1 << (n - 1) { v - (1 << n) + 1 } else { v })
    }

    fn decode(&mut self, table: &Huffman) -> Result<u8, String> {
        if self.count < 16 {
            self.fill();
        }
        let peek = (self.acc >> 48) as i32;
        let fast = table.fast[(peek >> (16 - FAST_BITS)) as usize];
        if fast != 0 {
            self.bits(u32::from(fast >> 8));
            return Ok(fast as u8);
        }
        for len in FAST_BITS + 1..=16 {
            let code = peek >> (16 - len);
            if code <= table.max_code[len as usize] {
                self.bits(len);
                return Ok(table.symbols[(code + table.offset[len as usize]) as usize]);
            }
        }
        Err("a Huffman code that is in no table".into())
    }

    /// At a restart interval's end: drops the partial byte and steps over the RSTn marker
    /// (or, in damaged data, up to the next marker).
    fn restart(&mut self) {
        self.acc = 0;
        self.count = 0;
        let data = self.data;
        while self.pos + 1 < data.len() && !(data[self.pos] == 0xFF && !matches!(data[self.pos + 1], 0 | 0xFF)) {
            self.pos += 1;
        }
        if self.pos + 1 < data.len() && (0xD0..=0xD7).contains(&data[self.pos + 1]) {
            self.pos += 2;
            self.at_marker = false;
        } else {
            self.at_marker = true;
        }
    }

    /// Bytes read so far; the caller goes on looking for the next marker from there.
    fn consumed(&self) -> usize {
        self.pos
    }
}

/// What a scan codes.
#[derive(Clone, Copy, PartialEq)]
enum Pass {
    Sequential,
    DcFirst,
    DcRefine,
    AcFirst,
    AcRefine,
}

/// The state of one scan's decoding.
struct ScanDecoder<'t, 'd> {
    bits: Bits<'d>,
    pass: Pass,
    ss: usize,
    se: usize,
    al: u32,
    /// DC and AC tables of each scan component.
    tables: Vec<(Option<&'t Huffman>, Option<&'t Huffman>)>,
    /// DC predictions of each scan component.
    dc_pred: Vec<i32>,
    eob_run: u32,
}

fn table<'t>(tables: &'t [Option<Huffman>; 4], i: usize, what: &str) -> Result<&'t Huffman, String> {
    tables[i].as_ref().ok_or_else(|| format!("a scan using {what} Huffman table {i}, which is not defined"))
}

impl ScanDecoder<'_, '_> {
    /// Decodes one block of scan component `c` into `block` (natural order).
    fn block(&mut self, c: usize, block: &mut [i16; 64]) -> Result<(), String> {
        let (dc, ac) = self.tables[c];
        let missing = || "a missing Huffman table".to_string();
        match self.pass {
            Pass::Sequential | Pass::DcFirst => {
                let s = self.bits.decode(dc.ok_or_else(missing)?)?;
                let diff = self.bits.signed(u32::from(s))?;
                self.dc_pred[c] = self.dc_pred[c].wrapping_add(diff);
                block[0] = (self.dc_pred[c] << self.al) as i16;
                if self.pass == Pass::Sequential {
                    self.ac_first(ac.ok_or_else(missing)?, block, 1, 63)?;
                }
            }
            Pass::DcRefine => {
                if self.bits.bit() {
                    block[0] |= 1 << self.al;
                }
            }
            Pass::AcFirst => {
                if self.eob_run > 0 {
                    self.eob_run -= 1;
                } else {
                    self.ac_first(ac.ok_or_else(missing)?, block, self.ss, self.se)?;
                }
            }
            Pass::AcRefine => self.ac_refine(ac.ok_or_else(missing)?, block)?,
        }
        Ok(())
    }

    /// AC coefficients `ss..=se` of a sequential scan or a first progressive AC scan.
    fn ac_first(&mut self, ac: &Huffman, block: &mut [i16; 64], ss: usize, se: usize) -> Result<(), String> {
        let mut k = ss;
        while k <= se {
            let rs = self.bits.decode(ac)?;
            let (r, s) = (usize::from(rs >> 4), u32::from(rs & 15));
            if s != 0 {
                k += r;
                block[ZIGZAG[k.min(79)]] = (self.bits.signed(s)? << self.al) as i16;
                k += 1;
            } else if r == 15 {
                k += 16;
            } else {
                if self.pass == Pass::AcFirst {
                    self.eob_run = (1u32 << r) + self.bits.bits(r as u32) as u32 - 1;
                }
                break;
            }
        }
        Ok(())
    }

    /// A refining AC scan: one more bit of coefficients already nonzero, new coefficients of
    /// magnitude `2^al` (ITU T.81 G.1.2.3, in libjpeg's order of reading bits).
    fn ac_refine(&mut self, ac: &Huffman, block: &mut [i16; 64]) -> Result<(), String> {
        let (p1, m1) = (1i32 << self.al, -1i32 << self.al);
        let mut k = self.ss;
        if self.eob_run == 0 {
            while k <= self.se {
                let rs = self.bits.decode(ac)?;
                let (mut r, s) = (i32::from(rs >> 4), rs & 15);
                let value = if s != 0 {
                    if self.bits.bit() {
                        p1
                    } else {
                        m1
                    }
                } else if r != 15 {
                    self.eob_run = (1u32 << r) + self.bits.bits(r as u32) as u32;
                    break;
                } else {
                    0
                };
                while k <= self.se {
                    let z = &mut block[ZIGZAG[k]];
                    if *z != 0 {
                        self.refine(z, p1, m1);
                    } else {
                        r -= 1;
                        if r < 0 {
                            break;
                        }
                    }
                    k += 1;
                }
                if value != 0 {
                    block[ZIGZAG[k]] = value as i16;
                }
                k += 1;
            }
        }
        if self.eob_run > 0 {
            while k <= self.se {
                let z = &mut block[ZIGZAG[k]];
                if *z != 0 {
                    self.refine(z, p1, m1);
                }
                k += 1;
            }
            self.eob_run -= 1;
        }
        Ok(())
    }

    /// Reads the correction bit of a nonzero coefficient.
    fn refine(&mut self, z: &mut i16, p1: i32, m1: i32) {
        if self.bits.bit() && (*z as i32 & p1) == 0 {
            *z = (*z as i32 + if *z >= 0 { p1 } else { m1 }) as i16;
        }
    }
}

/// Decodes the scan `scan` whose entropy-coded data starts `data`, into the coefficients of
/// `frame`'s components. Returns how many bytes of `data` it read.
pub(super) fn decode_scan(
    frame: &mut Frame,
    scan: &Scan,
    dc: &[Option<Huffman>; 4],
    ac: &[Option<Huffman>; 4],
    restart_interval: usize,
    data: &[u8],
) -> Result<usize, String> {
    let pass = match (frame.progressive, scan.ss, scan.ah) {
        (false, _, _) => Pass::Sequential,
        (true, 0, 0) => Pass::DcFirst,
        (true, 0, _) => Pass::DcRefine,
        (true, _, 0) => Pass::AcFirst,
        (true, _, _) => Pass::AcRefine,
    };
    let mut tables = Vec::new();
    for sc in &scan.comps {
        let needs_dc = matches!(pass, Pass::Sequential | Pass::DcFirst);
        let needs_ac = matches!(pass, Pass::Sequential | Pass::AcFirst | Pass::AcRefine);
        tables.push((
            if needs_dc { Some(table(dc, sc.dc_table, "DC")?) } else { None },
            if needs_ac { Some(table(ac, sc.ac_table, "AC")?) } else { None },
        ));
    }
    let mut dec = ScanDecoder {
        bits: Bits::new(data),
        pass,
        ss: scan.ss,
        se: scan.se,
        al: scan.al,
        tables,
        dc_pred: vec![0; scan.comps.len()],
        eob_run: 0,
    };
    let single = scan.comps.len() == 1;
    let (units_x, units) = if single {
        let (bx, by) = frame.scan_blocks(scan.comps[0].component);
        (bx, bx * by)
    } else {
        (frame.mcus_x, frame.mcus_x * frame.mcus_y)
    };
    for unit in 0..units {
        if restart_interval > 0 && unit > 0 && unit % restart_interval == 0 {
            dec.bits.restart();
            dec.dc_pred.fill(0);
            dec.eob_run = 0;
        }
        let (ux, uy) = (unit % units_x, unit / units_x);
        for (c, sc) in scan.comps.iter().enumerate() {
            let comp = &mut frame.comps[sc.component];
            let (h, v) = if single { (1, 1) } else { (comp.h, comp.v) };
            for by in uy * v..(uy + 1) * v {
                for bx in ux * h..(ux + 1) * h {
                    let index = by * comp.blocks_w + bx;
                    dec.block(c, &mut comp.coefs[index])?;
                }
            }
        }
    }
    Ok(dec.bits.consumed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_is_a_permutation_then_the_last_coefficient() {
        let mut seen = [false; 64];
        for &z in &ZIGZAG[..64] {
            seen[z] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert!(ZIGZAG[64..].iter().all(|&z| z == 63));
        // Zigzag walks anti-diagonals: row + column never decreases.
        assert!(ZIGZAG[..64].windows(2).all(|w| w[0] / 8 + w[0] % 8 <= w[1] / 8 + w[1] % 8));
    }

    #[test]
    fn huffman_codes_decode_with_stuffing_and_stop_at_markers() {
        // Lengths: one code of 2 bits (00 -> 5), two of 3 (010 -> 7, 011 -> 9), one of 12
        // bits (100000000000 -> 42).
        let mut counts = [0u8; 16];
        counts[1] = 1;
        counts[2] = 2;
        counts[11] = 1;
        let t = Huffman::new(&counts, &[5, 7, 9, 42]).unwrap();
        // 00 011 010 | 100000000000 | 1111 1111 (stuffed FF 00) | then marker FF D9.
        let data = [0b0001_1010, 0b1000_0000, 0b0000_1111, 0b1111_1111, 0x00, 0b1111_0000, 0xFF, 0xD9];
        let mut bits = Bits::new(&data);
        let got: Vec<u8> = (0..4).map(|_| bits.decode(&t).unwrap()).collect();
        assert_eq!(got, [5, 9, 7, 42]);
        assert_eq!(bits.bits(12), 0b1111_1111_1111);
        assert_eq!(bits.bits(4), 0b1111);
        assert_eq!(bits.bits(4), 0);
        assert_eq!(bits.bits(16), 0, "zeros past the marker");
        assert!(bits.at_marker);
        assert_eq!(bits.consumed(), 6, "stops at the marker");
        assert!(bits.decode(&t).is_ok() && Bits::new(&[0xFF, 0xD9]).decode(&t).is_ok());
        assert!(Bits::new(&[0b1111_1111, 0]).decode(&t).is_err(), "all ones is no code");
        let mut too_many = [0u8; 16];
        too_many[0] = 3;
        assert!(Huffman::new(&too_many, &[1, 2, 3]).is_err());
    }

    #[test]
    fn magnitude_categories_extend_to_signed_values() {
        // Category 3: 000..011 are -7..-4, 100..111 are 4..7.
        let mut bits = Bits::new(&[0b0001_0011, 0b1000_0000]);
        assert_eq!([0, 0, 0].map(|_| bits.signed(3).unwrap()), [-7, 4, 7]);
        assert_eq!(bits.signed(0).unwrap(), 0);
        assert!(bits.signed(17).is_err());
    }
}

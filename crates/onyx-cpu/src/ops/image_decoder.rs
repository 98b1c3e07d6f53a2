//! ImageDecoder (opset 20): decodes one encoded image (a 1-D uint8 tensor holding a BMP, JPEG,
//! JPEG 2000, PNG, PNM, TIFF or WebP file) into an `[H, W, C]` uint8 tensor, `C = 3` for `RGB`
//! (the default) and `BGR`, `C = 1` for `Grayscale`.
//!
//! ONNX's reference decodes with Pillow, so the pixels are Pillow's: JPEG through [`jpeg`],
//! which matches libjpeg-turbo bit for bit (JPEGs it does not read, such as CMYK or arithmetic
//! coded ones, go to the `image` crate); JPEG 2000 through `hayro-jpeg2000`; the lossless
//! formats through the `image` crate. Grayscale is computed from the RGB pixels with ITU-R
//! 601-2 luma in 16-bit fixed point (`(19595 R + 38470 G + 7471 B + 2^15) >> 16`), the
//! conversion Pillow's `convert("L")` makes, so gray sources come back unchanged.

mod jpeg;

use onyx_core::ep::{Kernel, NodeContext, ValueRef};
use onyx_core::{DataType, Error, Location, Result, Value};

use super::util;
use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("ImageDecoder", build_image_decoder);
}

/// The channel layout of the output.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PixelFormat {
    Rgb,
    Bgr,
    Grayscale,
}

/// An ImageDecoder node with its pixel format decoded.
struct ImageDecoder {
    format: PixelFormat,
    at: Location,
}

fn build_image_decoder(ctx: &NodeContext<'_>) -> Result<Box<dyn Kernel>> {
    let at = ctx.node.location();
    let format = match ctx.node.string_or("pixel_format", "RGB")?.as_str() {
        "RGB" => PixelFormat::Rgb,
        "BGR" => PixelFormat::Bgr,
        "Grayscale" => PixelFormat::Grayscale,
        other => return Err(Error::attribute(&at, "pixel_format", "RGB, BGR or Grayscale", other)),
    };
    Ok(Box::new(ImageDecoder { format, at }))
}

/// Pillow's RGB → L conversion of one pixel.
fn luma([r, g, b]: [u8; 3]) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

/// The `[H, W, C]` pixels of RGB data `rgb` (`h * w * 3` bytes) in `format`.
fn convert(rgb: Vec<u8>, format: PixelFormat) -> Vec<u8> {
    match format {
        PixelFormat::Rgb => rgb,
        PixelFormat::Bgr => rgb.chunks_exact(3).flat_map(|p| [p[2], p[1], p[0]]).collect(),
        PixelFormat::Grayscale => rgb.chunks_exact(3).map(|p| luma([p[0], p[1], p[2]])).collect(),
    }
}

/// The signatures of JPEG 2000: the JP2 file format's first box, and a bare codestream.
const JP2_SIGNATURE: &[u8] = &[0, 0, 0, 12, b'j', b'P', b' ', b' ', 13, 10, 0x87, 10];
const J2K_CODESTREAM: &[u8] = &[0xFF, 0x4F, 0xFF, 0x51];

/// The most pixels an image may have (64 Mi, 8192x8192): a few bytes can declare any size, and
/// decoding allocates for it. Larger JPEGs go to the `image` crate, within its own memory limits;
/// larger JPEG 2000 images are an error.
const MAX_PIXELS: usize = 1 << 26;

/// What the node expects of its input, for errors.
const EXPECTED: &str = "an encoded BMP, JPEG, JPEG 2000, PNG, PNM, TIFF or WebP image";

impl ImageDecoder {
    fn decode(&self, bytes: &[u8]) -> Result<Value> {
        let (w, h, rgb) = if bytes.starts_with(JP2_SIGNATURE) || bytes.starts_with(J2K_CODESTREAM) {
            self.decode_jpeg2000(bytes)?
        } else if let Ok(d) = jpeg::decode(bytes) {
            let rgb = if d.channels == 1 { d.pixels.iter().flat_map(|&g| [g, g, g]).collect() } else { d.pixels };
            (d.width, d.height, rgb)
        } else {
            self.decode_general(bytes)?
        };
        let channels = if self.format == PixelFormat::Grayscale { 1 } else { 3 };
        util::out(vec![h, w, channels], convert(rgb, self.format))
    }

    /// Any format of the `image` crate: `(width, height, RGB pixels)`.
    fn decode_general(&self, bytes: &[u8]) -> Result<(usize, usize, Vec<u8>)> {
        let image = image::load_from_memory(bytes).map_err(|e| {
            let found = match image::guess_format(bytes) {
                Ok(f) => format!("a {f:?} image that does not decode: {e}"),
                Err(_) => format!("bytes in no supported format ({e})"),
            };
            Error::input(&self.at, 0, EXPECTED, found)
        })?;
        let rgb = image.to_rgb8();
        Ok((rgb.width() as usize, rgb.height() as usize, rgb.into_raw()))
    }

    /// A JPEG 2000 file or codestream in gray or RGB (an alpha channel is dropped).
    fn decode_jpeg2000(&self, bytes: &[u8]) -> Result<(usize, usize, Vec<u8>)> {
        let bad =
            |e: String| Error::input(&self.at, 0, EXPECTED, format!("a JPEG 2000 image that does not decode: {e}"));
        let settings = hayro_jpeg2000::DecodeSettings::default();
        let image = hayro_jpeg2000::Image::new(bytes, &settings).map_err(|e| bad(format!("{e:?}")))?;
        let (w, h) = (image.width() as usize, image.height() as usize);
        if w * h > MAX_PIXELS {
            return Err(bad(format!("{w}x{h} pixels (at most {MAX_PIXELS})")));
        }
        let color = image.color_space().num_channels() as usize;
        let channels = color + usize::from(image.has_alpha());
        let pixels =
            image.decode(&mut hayro_jpeg2000::DecoderContext::default()).map_err(|e| bad(format!("{e:?}")))?.data_u8();
        if pixels.len() != w * h * channels || !matches!(color, 1 | 3) {
            return Err(bad(format!("{color} colour channels (gray or RGB expected)")));
        }
        let rgb = pixels
            .chunks_exact(channels)
            .flat_map(|p| if color == 1 { [p[0]; 3] } else { [p[0], p[1], p[2]] })
            .collect();
        Ok((w, h, rgb))
    }
}

impl Kernel for ImageDecoder {
    fn run(&self, inputs: &[Option<ValueRef<'_>>], _wanted: &[bool]) -> Result<Vec<Value>> {
        let at = &self.at;
        let x = util::input(inputs, 0, at)?;
        util::expect_dtype(&x, &[DataType::Uint8], 0, at)?;
        if x.rank() != 1 {
            return Err(Error::input(at, 0, "a 1-D uint8 tensor of encoded bytes", format!("{:?}", x.shape())));
        }
        Ok(vec![self.decode(x.as_slice::<u8>()?)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul::test_support::{build, node, run, string, Rng};
    use onyx_core::Tensor;

    fn kernel(format: &str) -> Result<Box<dyn Kernel>> {
        build(build_image_decoder, &node("ImageDecoder", &["x"], 1, vec![("pixel_format", string(format))]), 20)
    }

    /// A random RGB image of odd size encoded losslessly in `format`.
    fn encoded(w: u32, h: u32, format: image::ImageFormat, seed: u64) -> (Vec<u8>, Vec<u8>) {
        let mut rng = Rng::new(seed);
        let pixels: Vec<u8> = (0..w * h * 3).map(|_| rng.range(0, 256) as u8).collect();
        let img = image::RgbImage::from_raw(w, h, pixels.clone()).expect("w * h * 3 bytes");
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, format).expect("encodes");
        (out.into_inner(), pixels)
    }

    fn decode(format: &str, bytes: Vec<u8>) -> Result<Tensor> {
        let k = kernel(format)?;
        let n = bytes.len();
        let y = run(k.as_ref(), &[Some(Tensor::from_vec(vec![n], bytes).unwrap())], 1)?;
        y.into_iter().next().unwrap().into_tensor()
    }

    #[test]
    fn lossless_formats_round_trip_in_every_pixel_format() {
        let (w, h) = (7, 5);
        for (i, f) in
            [image::ImageFormat::Png, image::ImageFormat::Bmp, image::ImageFormat::Tiff, image::ImageFormat::Pnm]
                .into_iter()
                .enumerate()
        {
            let (bytes, px) = encoded(w, h, f, i as u64 + 1);
            let rgb = decode("RGB", bytes.clone()).unwrap();
            assert_eq!(rgb.shape(), [h as usize, w as usize, 3], "{f:?}");
            assert_eq!(rgb.as_slice::<u8>().unwrap(), &px[..], "{f:?}");
            let bgr = decode("BGR", bytes.clone()).unwrap();
            let want: Vec<u8> = px.chunks(3).flat_map(|p| [p[2], p[1], p[0]]).collect();
            assert_eq!(bgr.as_slice::<u8>().unwrap(), &want[..], "{f:?}");
            let gray = decode("Grayscale", bytes).unwrap();
            assert_eq!(gray.shape(), [h as usize, w as usize, 1]);
            let want: Vec<u8> = px
                .chunks(3)
                .map(|p| (0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64).round() as u8)
                .collect();
            for (g, w) in gray.as_slice::<u8>().unwrap().iter().zip(&want) {
                assert!(g.abs_diff(*w) <= 1, "{f:?}: luma {g} vs {w}");
            }
        }
    }

    /// A 17x11 RGB JPEG 2000 file (reversible wavelet, lossless) that Pillow wrote, and its pixels.
    const JP2: &[u8] = include_bytes!("image_decoder/testdata/lossless.jp2");
    const JP2_RGB: &[u8] = include_bytes!("image_decoder/testdata/lossless.rgb");

    #[test]
    fn jpeg2000_decodes_losslessly_and_damaged_files_fail_cleanly() {
        let rgb = decode("RGB", JP2.to_vec()).unwrap();
        assert_eq!(rgb.shape(), [11, 17, 3]);
        assert!(rgb.as_slice::<u8>().unwrap() == JP2_RGB);
        let mut rng = Rng::new(12);
        for case in 0..300 {
            let mut bytes = JP2.to_vec();
            let at = rng.range(0, bytes.len() as i64) as usize;
            bytes[at] = rng.range(0, 256) as u8;
            if case % 4 == 0 {
                bytes.truncate(rng.range(1, bytes.len() as i64) as usize);
            }
            if let Ok(t) = decode("BGR", bytes) {
                assert_eq!(t.len(), t.shape().iter().product::<usize>(), "case {case}");
            }
        }
        // A header declaring 60000x60000 pixels (in the JP2 header box and the codestream).
        let mut huge = JP2.to_vec();
        let ihdr = huge.windows(4).position(|w| w == b"ihdr").unwrap() + 4;
        let siz = huge.windows(2).position(|w| w == [0xFF, 0x51]).unwrap() + 6;
        for at in [ihdr, ihdr + 4, siz, siz + 4] {
            huge[at..at + 4].copy_from_slice(&60000u32.to_be_bytes());
        }
        let e = decode("RGB", huge).err().unwrap().to_string();
        assert!(e.contains("ImageDecoder") && e.contains("60000x60000 pixels"), "{e}");
    }

    #[test]
    fn gray_pixels_keep_their_value() {
        for v in 0..=255u8 {
            assert_eq!(luma([v, v, v]), v);
        }
    }

    #[test]
    fn bad_bytes_and_attributes_are_errors_naming_the_node() {
        let e = decode("RGB", vec![1, 2, 3, 4, 5]).err().unwrap().to_string();
        assert!(e.contains("ImageDecoder") && e.contains("no supported format"), "{e}");
        let (mut bytes, _) = encoded(5, 3, image::ImageFormat::Png, 9);
        bytes.truncate(bytes.len() / 2);
        let e = decode("RGB", bytes).err().unwrap().to_string();
        assert!(e.contains("Png"), "{e}");
        let e = kernel("CMYK").err().unwrap().to_string();
        assert!(e.contains("pixel_format"), "{e}");
        let k = kernel("RGB").unwrap();
        let e =
            run(k.as_ref(), &[Some(Tensor::from_vec(vec![2], vec![1i32, 2]).unwrap())], 1).err().unwrap().to_string();
        assert!(e.contains("uint8"), "{e}");
    }
}

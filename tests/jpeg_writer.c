/*
 * Test-only JPEG encoder on top of libjpeg's compression API.
 *
 * Pillow cannot produce 4:4:0 or true 4:1:1 sampling, arithmetic coding, YCCK or arbitrary restart
 * intervals, and the decoder has to be tested on all of those, so tests/jpeg_factory.py compiles this
 * file and drives it through a pipe.
 *
 * Reads width*height*components raw 8-bit interleaved pixels, writes one JPEG.
 *
 *   jpeg_writer --width W --height H --components 1|3|4
 *               [--colorspace gray|ycbcr|rgb|cmyk|ycck] [--sampling 2x2,1x1,1x1]
 *               [--quality 1-100] [--progressive] [--restart-interval N] [--restart-rows N]
 *               [--arithmetic] [--optimize] [--jfif 0|1] [--adobe 0|1]
 *               [--input PATH|-] [--output PATH|-]
 *
 * Any libjpeg error (or a bad option) prints the message to stderr and exits with status 1.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* This is a one-shot process, so on error it can exit and leave the cleanup to the OS. */
static void on_libjpeg_error(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  fprintf(stderr, "jpeg_writer: libjpeg error: %s\n", message);
  exit(1);
}

static void fail(const char* message, const char* detail) {
  fprintf(stderr, "jpeg_writer: %s%s%s\n", message, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

/* strtol with the whole string required, so that "12x" or "" is an error rather than a silent 12 or 0. */
static long parse_long(const char* text, const char* what, long lo, long hi) {
  char* end = NULL;
  long value;
  errno = 0;
  value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < lo || value > hi) fail("bad value for", what);
  return value;
}

static J_COLOR_SPACE parse_colorspace(const char* name) {
  if (strcmp(name, "gray") == 0) return JCS_GRAYSCALE;
  if (strcmp(name, "ycbcr") == 0) return JCS_YCbCr;
  if (strcmp(name, "rgb") == 0) return JCS_RGB;
  if (strcmp(name, "cmyk") == 0) return JCS_CMYK;
  if (strcmp(name, "ycck") == 0) return JCS_YCCK;
  fail("unknown colorspace", name);
  return JCS_UNKNOWN;
}

/* "2x2,1x1,1x1": one HxV pair per JPEG component, in component order. */
static void apply_sampling(j_compress_ptr cinfo, const char* spec) {
  const char* p = spec;
  int index = 0;
  while (*p != '\0') {
    int h = 0, v = 0, used = 0;
    if (index >= cinfo->num_components) fail("more sampling factors than JPEG components", spec);
    if (sscanf(p, "%1dx%1d%n", &h, &v, &used) != 2 || h < 1 || h > 4 || v < 1 || v > 4)
      fail("bad sampling factors (want HxV with 1..4)", spec);
    cinfo->comp_info[index].h_samp_factor = h;
    cinfo->comp_info[index].v_samp_factor = v;
    index++;
    p += used;
    if (*p == ',') p++;
    else if (*p != '\0') fail("bad sampling separator", spec);
  }
  if (index != cinfo->num_components) fail("fewer sampling factors than JPEG components", spec);
}

static unsigned char* read_all(const char* path, size_t expected) {
  FILE* in = (path == NULL || strcmp(path, "-") == 0) ? stdin : fopen(path, "rb");
  unsigned char* pixels;
  size_t got;
  int extra;
  if (in == NULL) fail("cannot open input", path);
  pixels = (unsigned char*)malloc(expected ? expected : 1);
  if (pixels == NULL) fail("out of memory for pixels", NULL);
  got = fread(pixels, 1, expected, in);
  if (got != expected) fail("input shorter than width*height*components", NULL);
  /* A longer input means the caller's shape is wrong; better to say so than to encode garbage. */
  extra = fgetc(in);
  if (extra != EOF) fail("input longer than width*height*components", NULL);
  if (in != stdin) fclose(in);
  return pixels;
}

int main(int argc, char** argv) {
  /* clang-format off */
  static const struct option options[] = {
      {"width", required_argument, NULL, 'w'},
      {"height", required_argument, NULL, 'h'},
      {"components", required_argument, NULL, 'c'},
      {"colorspace", required_argument, NULL, 's'},
      {"sampling", required_argument, NULL, 'f'},
      {"quality", required_argument, NULL, 'q'},
      {"progressive", no_argument, NULL, 'p'},
      {"restart-interval", required_argument, NULL, 'r'},
      {"restart-rows", required_argument, NULL, 'R'},
      {"arithmetic", no_argument, NULL, 'a'},
      {"optimize", no_argument, NULL, 'o'},
      {"jfif", required_argument, NULL, 'J'},
      {"adobe", required_argument, NULL, 'A'},
      {"input", required_argument, NULL, 'i'},
      {"output", required_argument, NULL, 'O'},
      {NULL, 0, NULL, 0}};
  /* clang-format on */
  long width = -1, height = -1, components = -1, quality = 90;
  long restart_interval = 0, restart_rows = 0, jfif = -1, adobe = -1;
  int progressive = 0, arithmetic = 0, optimize = 0, opt;
  const char *colorspace = NULL, *sampling = NULL, *input = NULL, *output = NULL;

  struct jpeg_compress_struct cinfo;
  struct jpeg_error_mgr jerr;
  unsigned char *pixels, *jpeg = NULL;
  unsigned long jpeg_size = 0;
  size_t row_stride;
  FILE* out;

  while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
    switch (opt) {
      case 'w': width = parse_long(optarg, "--width", 1, JPEG_MAX_DIMENSION); break;
      case 'h': height = parse_long(optarg, "--height", 1, JPEG_MAX_DIMENSION); break;
      case 'c': components = parse_long(optarg, "--components", 1, 4); break;
      case 's': colorspace = optarg; break;
      case 'f': sampling = optarg; break;
      case 'q': quality = parse_long(optarg, "--quality", 1, 100); break;
      case 'p': progressive = 1; break;
      case 'r': restart_interval = parse_long(optarg, "--restart-interval", 0, 65535); break;
      case 'R': restart_rows = parse_long(optarg, "--restart-rows", 0, 65535); break;
      case 'a': arithmetic = 1; break;
      case 'o': optimize = 1; break;
      case 'J': jfif = parse_long(optarg, "--jfif", 0, 1); break;
      case 'A': adobe = parse_long(optarg, "--adobe", 0, 1); break;
      case 'i': input = optarg; break;
      case 'O': output = optarg; break;
      default: fail("usage: see the comment at the top of jpeg_writer.c", NULL);
    }
  }
  if (optind != argc) fail("unexpected argument", argv[optind]);
  if (width < 0 || height < 0 || components < 0) fail("--width, --height and --components are required", NULL);
  if (components == 2) fail("--components must be 1, 3 or 4", NULL);

  row_stride = (size_t)width * (size_t)components;
  pixels = read_all(input, row_stride * (size_t)height);

  cinfo.err = jpeg_std_error(&jerr);
  jerr.error_exit = on_libjpeg_error;
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &jpeg, &jpeg_size);

  cinfo.image_width = (JDIMENSION)width;
  cinfo.image_height = (JDIMENSION)height;
  cinfo.input_components = (int)components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  if (colorspace != NULL) jpeg_set_colorspace(&cinfo, parse_colorspace(colorspace));
  /* set_colorspace resets the sampling factors, so ours go after it. */
  if (sampling != NULL) apply_sampling(&cinfo, sampling);
  jpeg_set_quality(&cinfo, (int)quality, TRUE);
  /* The progression script depends on the component count, which set_colorspace fixes. */
  if (progressive) jpeg_simple_progression(&cinfo);
  cinfo.arith_code = arithmetic ? TRUE : FALSE;
  cinfo.optimize_coding = optimize ? TRUE : FALSE;
  cinfo.restart_interval = (unsigned int)restart_interval;
  cinfo.restart_in_rows = (int)restart_rows;
  if (jfif >= 0) cinfo.write_JFIF_header = jfif ? TRUE : FALSE;
  if (adobe >= 0) cinfo.write_Adobe_marker = adobe ? TRUE : FALSE;

  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = pixels + (size_t)cinfo.next_scanline * row_stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  free(pixels);

  out = (output == NULL || strcmp(output, "-") == 0) ? stdout : fopen(output, "wb");
  if (out == NULL) fail("cannot open output", output);
  if (fwrite(jpeg, 1, jpeg_size, out) != jpeg_size || fflush(out) != 0) fail("cannot write output", output);
  if (out != stdout && fclose(out) != 0) fail("cannot close output", output);
  free(jpeg);
  return 0;
}

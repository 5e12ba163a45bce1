// fp4d::h5 (src/trace/h5.hpp): round trips, attributes, groups, errors, appendable
// datasets, dimension scales, atomic output. The raw HDF5 API is used here (only) to check how
// things are stored: chunking/filters, string and bool types, attached scales.
#include "trace/h5.hpp"

#include <hdf5.h>
#include <hdf5_hl.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
namespace h5 = fp4d::h5;

namespace {

struct TempDir : fp4d_test::TempDir {
  TempDir() : fp4d_test::TempDir("fp4d_test_h5") {}
};

// Message of the h5::Error thrown by f ("" and a failed check if none is thrown).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const h5::Error& e) {
    return e.what();
  }
  INFO("expected an h5::Error, none was thrown");
  CHECK(false);
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <class T>
std::vector<T> pattern(std::size_t n, int salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      v[i] = static_cast<T>((static_cast<double>(i) - 1000.5) * 0.37 + salt);
    } else {
      // wraps inside the range of T, includes negative values for signed T
      std::uint64_t x = (i * 2654435761ull + static_cast<std::uint64_t>(salt)) & 0xFFFFFFFFull;
      if (i % 7 == 0) x = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
      if (i % 11 == 0) x = static_cast<std::uint64_t>(std::numeric_limits<T>::min());
      v[i] = static_cast<T>(x);
    }
  }
  return v;
}

struct Layout {
  bool chunked = false;
  int nfilters = 0;
  std::vector<H5Z_filter_t> filters;  // in pipeline order
  std::vector<hsize_t> chunk;
};

Layout layout_of(const h5::Dataset& d) {
  Layout l;
  hid_t dcpl = H5Dget_create_plist(d.id());
  REQUIRE(dcpl >= 0);
  l.chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
  if (l.chunked) {
    l.chunk.resize(32);
    int r = H5Pget_chunk(dcpl, 32, l.chunk.data());
    l.chunk.resize(static_cast<std::size_t>(r));
    l.nfilters = H5Pget_nfilters(dcpl);
    for (int i = 0; i < l.nfilters; ++i) {
      unsigned flags = 0;
      std::size_t nelmts = 0;
      unsigned config = 0;
      l.filters.push_back(H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelmts, nullptr, 0, nullptr, &config));
    }
  }
  H5Pclose(dcpl);
  return l;
}

template <class T>
void roundtrip_type(h5::Group& g, const std::string& tname) {
  const std::vector<h5::Dims> shapes = {{}, {3}, {2, 3}, {2, 2, 2}, {5000}, {70, 80}, {20, 30, 10}, {0}};
  int salt = 0;
  for (bool compress : {false, true}) {
    for (const auto& dims : shapes) {
      std::uint64_t n = 1;
      for (auto d : dims) n *= d;
      ++salt;
      const std::string name = tname + "/" + (compress ? "z" : "raw") + std::to_string(salt);
      INFO("type " << tname << " dataset " << name << " rank " << dims.size() << " n " << n);
      auto data = pattern<T>(n, salt);
      g.write(name, data, dims, h5::WriteOptions{.compress = compress});
      h5::Dims got_dims{99};
      auto back = g.read<T>(name, &got_dims);
      CHECK(got_dims == dims);
      REQUIRE(back.size() == data.size());
      CHECK(back == data);

      h5::Dataset d = g.open_dataset(name);
      Layout l = layout_of(d);
      CHECK(l.chunked == (compress && n > 4096));
      if (l.chunked) {
        // shuffle + deflate, then the checksum of what is stored
        CHECK(l.filters == std::vector<H5Z_filter_t>{H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE, H5Z_FILTER_FLETCHER32});
        REQUIRE(l.chunk.size() == dims.size());
        std::uint64_t bytes = sizeof(T);
        for (std::size_t i = 0; i < dims.size(); ++i) {
          CHECK(l.chunk[i] >= 1);
          CHECK(l.chunk[i] <= dims[i]);
          bytes *= l.chunk[i];
        }
        CHECK(bytes <= 256 * 1024);
      }
      h5::DatasetInfo inf = d.info();
      CHECK(inf.dims == dims);
      CHECK(inf.element_size == sizeof(T));
      CHECK(inf.type_class ==
            (std::is_floating_point_v<T> ? h5::TypeClass::Float : h5::TypeClass::Integer));
      CHECK(inf.is_signed == (std::is_signed_v<T> && !std::is_floating_point_v<T>));
      CHECK(inf.type_name == tname);
    }
  }
}

}  // namespace

TEST_CASE("h5: dataset round trip of every type, rank 0-3, compressed and not") {
  TempDir tmp;
  const std::string path = tmp.file("rt.h5");
  {
    h5::File f = h5::File::create(path);
    h5::Group g = f.root();
    roundtrip_type<float>(g, "float32");
    roundtrip_type<double>(g, "float64");
    roundtrip_type<std::int8_t>(g, "int8");
    roundtrip_type<std::uint8_t>(g, "uint8");
    roundtrip_type<std::int16_t>(g, "int16");
    roundtrip_type<std::uint16_t>(g, "uint16");
    roundtrip_type<std::int32_t>(g, "int32");
    roundtrip_type<std::uint32_t>(g, "uint32");
    roundtrip_type<std::int64_t>(g, "int64");
    roundtrip_type<std::uint64_t>(g, "uint64");
    f.close();
    CHECK(!f.is_open());
  }
  // the values survive closing and reopening
  h5::File f = h5::File::open_read(path);
  h5::Dims dims;
  auto v = f.root().read<std::uint64_t>("uint64/z14", &dims);
  CHECK(dims == h5::Dims{70, 80});
  CHECK(v == pattern<std::uint64_t>(70 * 80, 14));
  auto s = f.root().read<double>("float64/raw1", &dims);
  CHECK(dims.empty());
  CHECK(s == pattern<double>(1, 1));
}

TEST_CASE("h5: chunk shapes") {
  TempDir tmp;
  h5::File f = h5::File::create(tmp.file("chunks.h5"));
  h5::Group g = f.root();
  SECTION("large 2-D float: ~256 KiB square-ish chunks") {
    std::vector<float> big(1024 * 1024, 1.5f);
    g.write("big", big, {1024, 1024});
    Layout l = layout_of(g.open_dataset("big"));
    REQUIRE(l.chunked);
    CHECK(l.chunk == std::vector<hsize_t>{256, 256});
    CHECK(g.read<float>("big") == big);
  }
  SECTION("small enough: one chunk equal to dims") {
    std::vector<std::uint8_t> v(100000, 7);
    g.write("u8", v, {100000});
    CHECK(layout_of(g.open_dataset("u8")).chunk == std::vector<hsize_t>{100000});
  }
  SECTION("long 1-D double") {
    std::vector<double> v(1000000, 0.25);
    g.write("d", v);  // 1-D convenience overload, compressed by default
    Layout l = layout_of(g.open_dataset("d"));
    REQUIRE(l.chunked);
    CHECK(l.chunk == std::vector<hsize_t>{31250});  // 1e6 halved 5 times, 250 KB
  }
  SECTION("compress = false stays contiguous") {
    std::vector<float> v(10000, 2.0f);
    g.write("c", v.data(), {100, 100}, {.compress = false});
    CHECK(!layout_of(g.open_dataset("c")).chunked);
  }
}

TEST_CASE("h5: write errors and overwrite") {
  TempDir tmp;
  h5::File f = h5::File::create(tmp.file("w.h5"));
  h5::Group g = f.root();
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  g.write("x", v, {2, 3});
  CHECK(contains(error_of([&] { g.write("x", v, {6}); }), "'/x'"));
  CHECK(contains(error_of([&] { g.write("y", v, {4, 2}); }), "6 values for dims {4, 2}"));
  g.write("x", v, {6}, {.overwrite = true});
  h5::Dims dims;
  CHECK(g.read<float>("x", &dims) == v);
  CHECK(dims == h5::Dims{6});
  g.create_group("grp");
  CHECK(contains(error_of([&] { g.write("grp", v, {6}, {.overwrite = true}); }), "group"));
  CHECK(contains(error_of([&] { g.write<float>("nul", nullptr, {3}); }), "null data"));
  // nested names create intermediate groups
  g.write("deep/er/z", v, {3, 2});
  CHECK(g.is_group("deep/er"));
  CHECK(g.open_group("deep").read<float>("er/z") == v);
}

TEST_CASE("h5: attributes") {
  TempDir tmp;
  const std::string path = tmp.file("attrs.h5");
  const std::string unicode = "µ-σ ∑ 量子 drift 🚀 \"quoted\" é";
  {
    h5::File f = h5::File::create(path);
    h5::Group root = f.root();
    root.set_attr("name", std::string("fp4drift"));
    root.set_attr("literal", "a C string");  // must not become a bool
    root.set_attr("unicode", unicode);
    root.set_attr("empty", std::string());
    root.set_attr("lr", 3.0e-4);
    root.set_attr("lr32", 0.125f);
    root.set_attr("step", std::int64_t{-42});
    root.set_attr("seed", std::numeric_limits<std::uint64_t>::max());
    root.set_attr("small_int", 7);  // int -> int64
    root.set_attr("small_uint", 9u);  // unsigned -> uint64
    root.set_attr("yes", true);
    root.set_attr("no", false);
    root.set_attr("vd", std::vector<double>{1.5, -2.25, 1e300});
    root.set_attr("vi", std::vector<std::int64_t>{1, -2, std::numeric_limits<std::int64_t>::min()});
    root.set_attr("vempty", std::vector<double>{});
    // overwrite, also with a different type and shape
    root.set_attr("over", 1.0);
    root.set_attr("over", 2.0);
    root.set_attr("retype", 5.0);
    root.set_attr("retype", std::string("now a string"));
    root.set_attr("reshape", std::vector<double>{1, 2, 3});
    root.set_attr("reshape", std::vector<double>{4});

    h5::Group sub = root.create_group("sub");
    sub.set_attr("kind", "group attr");
    std::vector<float> v{1, 2, 3};
    sub.write("data", v);
    h5::Dataset d = sub.open_dataset("data");
    d.set_attr("units", "bits");
    d.set_attr("scale", 0.5);
    d.set_attr("scale", 0.75);
    d.set_attr("flag", true);
    CHECK(d.path() == "/sub/data");
  }
  h5::File f = h5::File::open_read(path);
  h5::Group root = f.root();
  CHECK(root.get_attr_string("name") == "fp4drift");
  CHECK(root.get_attr_string("literal") == "a C string");
  CHECK(root.get_attr_string("unicode") == unicode);
  CHECK(root.get_attr_string("empty").empty());
  CHECK(root.get_attr_double("lr") == 3.0e-4);
  CHECK(root.get_attr_double("lr32") == 0.125);
  CHECK(root.get_attr_int64("step") == -42);
  CHECK(root.get_attr_double("step") == -42.0);  // integer -> double is allowed
  CHECK(root.get_attr_uint64("seed") == std::numeric_limits<std::uint64_t>::max());
  CHECK(contains(error_of([&] { (void)root.get_attr_int64("seed"); }), "does not fit in int64"));
  CHECK(contains(error_of([&] { (void)root.get_attr_uint64("step"); }), "does not fit in uint64"));
  CHECK(root.get_attr_int64("small_int") == 7);
  CHECK(root.get_attr_uint64("small_uint") == 9);
  CHECK(root.get_attr_bool("yes"));
  CHECK(!root.get_attr_bool("no"));
  CHECK(root.get_attr_int64("yes") == 1);
  CHECK(root.get_attr_bool("small_int"));
  CHECK(root.get_attr_double_vector("vd") == std::vector<double>{1.5, -2.25, 1e300});
  CHECK(root.get_attr_int64_vector("vi") ==
        std::vector<std::int64_t>{1, -2, std::numeric_limits<std::int64_t>::min()});
  CHECK(root.get_attr_double_vector("vempty").empty());
  CHECK(root.get_attr_double_vector("lr") == std::vector<double>{3.0e-4});  // scalar as vector
  CHECK(root.get_attr_double("over") == 2.0);
  CHECK(root.get_attr_string("retype") == "now a string");
  CHECK(root.get_attr_double("reshape") == 4.0);  // one-element vector as scalar
  CHECK(root.has_attr("name"));
  CHECK(!root.has_attr("nope"));
  auto names = root.attr_names();
  CHECK(names.size() == 18);
  CHECK(std::find(names.begin(), names.end(), "unicode") != names.end());

  // type mismatches and missing attributes name the attribute and the object
  std::string e = error_of([&] { (void)root.get_attr_double("name"); });
  CHECK(contains(e, "'name'"));
  CHECK(contains(e, "group '/'"));
  CHECK(contains(e, "string"));
  CHECK(contains(error_of([&] { (void)root.get_attr_int64("lr"); }), "float64, expected an integer"));
  CHECK(contains(error_of([&] { (void)root.get_attr_string("step"); }), "expected a string"));
  CHECK(contains(error_of([&] { (void)root.get_attr_double("vd"); }), "3 elements"));
  e = error_of([&] { (void)root.get_attr_string("missing"); });
  CHECK(contains(e, "attribute 'missing' not found on group '/'"));
  CHECK(contains(e, path));

  h5::Group sub = root.open_group("sub");
  CHECK(sub.get_attr_string("kind") == "group attr");
  h5::Dataset d = sub.open_dataset("data");
  CHECK(d.get_attr_string("units") == "bits");
  CHECK(d.get_attr_double("scale") == 0.75);
  CHECK(d.get_attr_bool("flag"));
  CHECK(contains(error_of([&] { (void)d.get_attr_double("nope"); }), "dataset '/sub/data'"));

  // writing to a read-only file fails with HDF5's reason
  e = error_of([&] { root.set_attr("x", 1.0); });
  CHECK(contains(e, "cannot set attribute 'x' on group '/'"));
}

TEST_CASE("h5: storage of strings and bools is what h5py expects") {
  TempDir tmp;
  h5::File f = h5::File::create(tmp.file("types.h5"));
  h5::Group root = f.root();
  root.set_attr("s", "text");
  root.set_attr("b", true);

  hid_t a = H5Aopen(root.id(), "s", H5P_DEFAULT);
  REQUIRE(a >= 0);
  hid_t t = H5Aget_type(a);
  hid_t s = H5Aget_space(a);
  CHECK(H5Tget_class(t) == H5T_STRING);
  CHECK(H5Tis_variable_str(t) > 0);
  CHECK(H5Tget_cset(t) == H5T_CSET_UTF8);
  CHECK(H5Sget_simple_extent_type(s) == H5S_SCALAR);
  H5Sclose(s);
  H5Tclose(t);
  H5Aclose(a);

  a = H5Aopen(root.id(), "b", H5P_DEFAULT);
  REQUIRE(a >= 0);
  t = H5Aget_type(a);
  CHECK(H5Tget_class(t) == H5T_ENUM);
  CHECK(H5Tget_size(t) == 1);
  CHECK(H5Tget_nmembers(t) == 2);
  char* m0 = H5Tget_member_name(t, 0);
  char* m1 = H5Tget_member_name(t, 1);
  CHECK(std::string(m0) == "FALSE");
  CHECK(std::string(m1) == "TRUE");
  H5free_memory(m0);
  H5free_memory(m1);
  H5Tclose(t);
  H5Aclose(a);
}

TEST_CASE("h5: groups, exists, children") {
  TempDir tmp;
  const std::string path = tmp.file("groups.h5");
  h5::File f = h5::File::create(path);
  h5::Group root = f.root();
  CHECK(root.path() == "/");
  CHECK(root.file_path() == path);
  h5::Group a = root.create_group("a");
  h5::Group b = a.create_group("b");
  CHECK(b.path() == "/a/b");
  h5::Group z = root.create_group("x/y/z");  // intermediate groups created
  CHECK(z.path() == "/x/y/z");
  b.write("ds", std::vector<float>{1, 2});

  CHECK(root.exists("a"));
  CHECK(root.exists("a/b"));
  CHECK(root.exists("a/b/ds"));
  CHECK(root.exists("x/y/z"));
  CHECK(root.exists("/a/b"));
  CHECK(z.exists("/a/b/ds"));  // absolute from a subgroup
  CHECK(a.exists("b/ds"));
  CHECK(root.exists(""));
  CHECK(root.exists("/"));
  CHECK(!root.exists("missing"));
  CHECK(!root.exists("a/missing/c"));
  CHECK(!root.exists("missing/b/c"));
  CHECK(!root.exists("a/b/c"));
  CHECK(!root.exists("a/b/ds/below"));  // a dataset has no children
  CHECK(root.is_group("a/b"));
  CHECK(!root.is_group("a/b/ds"));
  CHECK(root.is_dataset("a/b/ds"));
  CHECK(!root.is_dataset("a/b/nope"));

  CHECK(contains(error_of([&] { root.create_group("a"); }), "'/a'"));
  CHECK(contains(error_of([&] { root.create_group("a"); }), "already exists"));
  std::string e = error_of([&] { (void)root.open_group("a/nope"); });
  CHECK(contains(e, "group '/a/nope' not found in '" + path + "'"));
  e = error_of([&] { (void)root.open_group("a/b/ds"); });
  CHECK(contains(e, "'/a/b/ds'"));
  CHECK(contains(e, "is a dataset, not a group"));

  h5::Group again = root.require_group("a/b");
  CHECK(again.path() == "/a/b");
  CHECK(again.exists("ds"));
  h5::Group fresh = root.require_group("new/one");
  CHECK(root.is_group("new/one"));
  fresh.set_attr("k", 1.0);

  root.create_group("c");
  CHECK(root.children() == std::vector<std::string>{"a", "c", "new", "x"});
  CHECK(a.children() == std::vector<std::string>{"b"});
  CHECK(b.children() == std::vector<std::string>{"ds"});
  CHECK(z.children().empty());

  // copies share the object; closing the file invalidates handles (no crash)
  h5::Group copy = b;
  CHECK(copy.id() == b.id());
  f.close();
  e = error_of([&] { (void)copy.children(); });
  CHECK(!e.empty());
  CHECK(contains(error_of([&] { (void)f.root(); }), "closed"));
}

TEST_CASE("h5: info and read conversion rules") {
  TempDir tmp;
  const std::string path = tmp.file("info.h5");
  h5::File f = h5::File::create(path);
  h5::Group g = f.root().create_group("grp");
  g.write("fl", std::vector<float>{1.5f, -2.0f, 3.25f}, {3, 1});
  g.write("i16", std::vector<std::int16_t>{-3, 4, 300});
  g.write("u64", std::vector<std::uint64_t>{1, 2}, {1, 2});
  double pi = 3.14159;
  g.write("scalar", &pi, {});

  h5::DatasetInfo i = g.info("fl");
  CHECK(i.dims == h5::Dims{3, 1});
  CHECK(i.type_class == h5::TypeClass::Float);
  CHECK(i.element_size == 4);
  CHECK(i.type_name == "float32");
  CHECK(i.elements() == 3);
  i = g.info("i16");
  CHECK(i.type_class == h5::TypeClass::Integer);
  CHECK(i.is_signed);
  CHECK(i.element_size == 2);
  CHECK(i.type_name == "int16");
  i = g.info("u64");
  CHECK(!i.is_signed);
  CHECK(i.element_size == 8);
  i = g.info("scalar");
  CHECK(i.dims.empty());
  CHECK(i.elements() == 1);

  // float <-> double and integer <-> integer convert
  CHECK(g.read<double>("fl") == std::vector<double>{1.5, -2.0, 3.25});
  CHECK(g.read<float>("scalar") == std::vector<float>{3.14159f});
  CHECK(g.read<std::int64_t>("i16") == std::vector<std::int64_t>{-3, 4, 300});
  CHECK(g.read<std::int32_t>("u64") == std::vector<std::int32_t>{1, 2});

  // float <-> integer does not
  std::string e = error_of([&] { (void)g.read<std::int32_t>("fl"); });
  CHECK(contains(e, "dataset '/grp/fl'"));
  CHECK(contains(e, "float32, expected an integer type"));
  e = error_of([&] { (void)g.read<float>("i16"); });
  CHECK(contains(e, "dataset '/grp/i16'"));
  CHECK(contains(e, "int16, expected a floating-point type"));
  CHECK(contains(e, path));
  CHECK(contains(error_of([&] { (void)f.root().read<double>("/grp/u64"); }), "'/grp/u64'"));
}

TEST_CASE("h5: missing files and objects") {
  TempDir tmp;
  const std::string missing = tmp.file("missing.h5");
  std::string e = error_of([&] { (void)h5::File::open_read(missing); });
  CHECK(contains(e, "cannot open '" + missing + "' for reading: no such file"));
  e = error_of([&] { (void)h5::File::open_rw(missing); });
  CHECK(contains(e, "'" + missing + "'"));
  CHECK(contains(e, "no such file"));
  e = error_of([&] { (void)h5::File::create(tmp.file("no/such/dir/x.h5")); });
  CHECK(contains(e, "no/such/dir"));
  e = error_of([&] { (void)h5::File::open_read(tmp.path.string()); });
  CHECK(contains(e, "directory"));

  const std::string text = tmp.file("text.h5");
  std::ofstream(text) << "not hdf5 at all\n";
  e = error_of([&] { (void)h5::File::open_read(text); });
  CHECK(contains(e, "'" + text + "'"));
  CHECK(contains(e, "not an HDF5 file"));

  const std::string path = tmp.file("objs.h5");
  {
    h5::File f = h5::File::create(path);
    f.root().create_group("a").write("d", std::vector<double>{1.0});
  }
  h5::File f = h5::File::open_read(path);
  h5::Group root = f.root();
  e = error_of([&] { (void)root.read<float>("a/b"); });
  CHECK(e == "dataset '/a/b' not found in '" + path + "'");
  e = error_of([&] { (void)root.open_group("a").info("nope"); });
  CHECK(e == "dataset '/a/nope' not found in '" + path + "'");
  e = error_of([&] { (void)root.read<float>("a"); });
  CHECK(contains(e, "'/a'"));
  CHECK(contains(e, "is a group, not a dataset"));
  // writing into a file opened read-only: Error naming the dataset, with HDF5's reason
  e = error_of([&] { root.write("new", std::vector<float>{1}); });
  CHECK(contains(e, "cannot write dataset '/new' in '" + path + "'"));
  CHECK(e.size() > std::string("cannot write dataset '/new' in '" + path + "'").size());
}

TEST_CASE("h5: HDF5's own error printing is silenced") {
  TempDir tmp;
  const std::string log = tmp.file("stderr.txt");
  std::fflush(stderr);
  int saved = ::dup(2);
  REQUIRE(saved >= 0);
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  ::close(fd);
  int thrown = 0;
  try {
    (void)h5::File::open_read(tmp.file("absent.h5"));
  } catch (const h5::Error&) {
    ++thrown;
  }
  try {
    h5::File f = h5::File::create(tmp.file("x.h5"));
    f.root().write("d", std::vector<float>{1});
    (void)f.root().read<int>("d");
  } catch (const h5::Error&) {
    ++thrown;
  }
  try {
    h5::File f = h5::File::open_read(tmp.file("x.h5"));
    f.root().set_attr("a", 1.0);  // read-only: fails inside HDF5
  } catch (const h5::Error&) {
    ++thrown;
  }
  try {
    h5::File f = h5::File::open_read(tmp.file("x.h5"));
    (void)f.root().get_attr_double("none");
  } catch (const h5::Error&) {
    ++thrown;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  CHECK(thrown == 4);
  CHECK(fs::file_size(log) == 0);
}

TEST_CASE("h5: appendable datasets") {
  TempDir tmp;
  const std::string path = tmp.file("trace.h5");
  {
    h5::File f = h5::File::create(path);
    h5::Group root = f.root();
    auto loss = root.create_appendable<float>("trace/loss", {}, 4);
    auto grad = root.create_appendable<double>("trace/grad", {3});
    auto hist = root.create_appendable<std::uint16_t>("trace/hist", {2, 2}, 3);
    CHECK(loss.rows() == 0);
    CHECK(loss.row_elements() == 1);
    CHECK(grad.row_shape() == h5::Dims{3});
    for (int i = 0; i < 5; ++i) {
      float x = static_cast<float>(i) * 0.5f;
      loss.append(&x, 1);
    }
    loss.append(std::vector<float>{10, 11, 12, 13, 14});
    CHECK(loss.rows() == 10);
    loss.append(nullptr, 0);  // no-op
    grad.append(pattern<double>(6, 1));  // 2 rows
    grad.append(pattern<double>(9, 2).data(), 3);
    CHECK(grad.rows() == 5);
    hist.append(std::vector<std::uint16_t>{1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(hist.rows() == 2);
    CHECK(contains(error_of([&] { grad.append(std::vector<double>(4)); }),
                   "not a multiple of the row size 3"));
    CHECK(grad.rows() == 5);
    loss.set_attr("units", "nats");  // an Appendable is a Dataset
    h5::Group info = root.open_group("trace");
    CHECK(info.children() == std::vector<std::string>{"grad", "hist", "loss"});
    CHECK(contains(error_of([&] { (void)root.create_appendable<float>("trace/loss", {}); }),
                   "exists"));
    loss.flush();
    f.flush();
  }
  {
    h5::File f = h5::File::open_rw(path);
    h5::Group root = f.root();
    auto loss = root.open_appendable<float>("trace/loss");
    CHECK(loss.rows() == 10);
    CHECK(loss.row_shape().empty());
    loss.append(std::vector<float>{20, 21, 22, 23, 24, 25, 26});
    CHECK(loss.rows() == 17);
    auto grad = root.open_appendable<double>("trace/grad");
    CHECK(grad.row_shape() == h5::Dims{3});
    grad.append(pattern<double>(3, 3));
    auto hist = root.open_appendable<std::uint16_t>("/trace/hist");
    CHECK(hist.row_shape() == h5::Dims{2, 2});

    // only the exact element type, and only datasets with an unlimited first dimension
    std::string e = error_of([&] { (void)root.open_appendable<double>("trace/loss"); });
    CHECK(contains(e, "dataset '/trace/loss'"));
    CHECK(contains(e, "float32"));
    CHECK(contains(error_of([&] { (void)root.open_appendable<std::int16_t>("trace/hist"); }),
                   "uint16"));
    root.write("fixed", std::vector<float>{1, 2, 3});
    CHECK(contains(error_of([&] { (void)root.open_appendable<float>("fixed"); }),
                   "not appendable"));
    CHECK(contains(error_of([&] { (void)root.open_appendable<float>("trace/nope"); }),
                   "dataset '/trace/nope' not found"));
  }
  h5::File f = h5::File::open_read(path);
  h5::Group root = f.root();
  h5::Dims dims;
  auto loss = root.read<float>("trace/loss", &dims);
  CHECK(dims == h5::Dims{17});
  CHECK(loss == std::vector<float>{0, 0.5f, 1, 1.5f, 2, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24,
                                   25, 26});
  auto grad = root.read<double>("trace/grad", &dims);
  CHECK(dims == h5::Dims{6, 3});
  std::vector<double> want = pattern<double>(6, 1);
  for (double x : pattern<double>(9, 2)) want.push_back(x);
  for (double x : pattern<double>(3, 3)) want.push_back(x);
  CHECK(grad == want);
  root.read<std::uint16_t>("trace/hist", &dims);
  CHECK(dims == h5::Dims{2, 2, 2});
  CHECK(root.open_dataset("trace/loss").get_attr_string("units") == "nats");
  Layout l = layout_of(root.open_dataset("trace/loss"));
  CHECK(l.chunked);
  CHECK(l.chunk == std::vector<hsize_t>{4});
  CHECK(l.filters == std::vector<H5Z_filter_t>{H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE, H5Z_FILTER_FLETCHER32});
}

TEST_CASE("h5: a killed writer keeps everything up to its last flush") {
  TempDir tmp;
  const std::string path = tmp.file("killed.h5");
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      h5::File f = h5::File::create(path);
      auto a = f.root().create_appendable<double>("metrics/loss", {2}, 8);
      for (int i = 0; i < 100; ++i) {
        double row[2] = {static_cast<double>(i), -static_cast<double>(i)};
        a.append(row, 1);
      }
      f.flush();
      for (int i = 100; i < 130; ++i) {  // not flushed
        double row[2] = {static_cast<double>(i), -static_cast<double>(i)};
        a.append(row, 1);
      }
    } catch (...) {
      ::_exit(3);
    }
    ::kill(::getpid(), SIGKILL);
    ::_exit(4);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  h5::File f = h5::File::open_read(path);
  h5::Dims dims;
  auto v = f.root().read<double>("metrics/loss", &dims);
  REQUIRE(dims.size() == 2);
  CHECK(dims[0] >= 100);
  CHECK(dims[1] == 2);
  for (std::size_t i = 0; i < 100; ++i) {
    CHECK(v[2 * i] == static_cast<double>(i));
    CHECK(v[2 * i + 1] == -static_cast<double>(i));
  }
}

TEST_CASE("h5: AtomicOutput") {
  TempDir tmp;
  const std::string final_path = tmp.file("run.h5");
  SECTION("commit renames .partial to the final path") {
    h5::AtomicOutput out(final_path);
    CHECK(out.final_path() == final_path);
    CHECK(out.temp_path() == final_path + ".partial");
    h5::File f = h5::File::create(out.temp_path());
    f.root().write("x", std::vector<float>{1, 2, 3});
    CHECK(contains(error_of([&] { out.commit(); }), "still open"));
    CHECK(!fs::exists(final_path));
    f.close();
    out.commit();
    CHECK(out.committed());
    CHECK(fs::exists(final_path));
    CHECK(!fs::exists(out.temp_path()));
    CHECK(h5::File::open_read(final_path).root().read<float>("x") ==
          std::vector<float>{1, 2, 3});
    CHECK(contains(error_of([&] { out.commit(); }), "already committed"));
  }
  SECTION("commit(File&) closes first and replaces an existing output") {
    std::ofstream(final_path) << "old";
    {
      h5::AtomicOutput out(final_path);
      h5::File f = h5::File::create(out.temp_path());
      f.root().set_attr("version", std::int64_t{2});
      out.commit(f);
      CHECK(!f.is_open());
    }
    CHECK(h5::File::open_read(final_path).root().get_attr_int64("version") == 2);
  }
  SECTION("no commit: the destructor removes the .partial and the final path stays absent") {
    std::string temp;
    {
      h5::AtomicOutput out(final_path);
      temp = out.temp_path();
      h5::File f = h5::File::create(out.temp_path());
      f.root().write("x", std::vector<float>{1, 2, 3});
      f.flush();
      CHECK(fs::exists(temp));
    }
    CHECK(!fs::exists(temp));
    CHECK(!fs::exists(final_path));
  }
  SECTION("rollback on exception") {
    auto run = [&] {
      h5::AtomicOutput out(final_path);
      h5::File f = h5::File::create(out.temp_path());
      f.root().write("x", std::vector<float>{1});
      throw std::runtime_error("simulated failure");
    };
    REQUIRE_THROWS(run());
    CHECK(!fs::exists(final_path + ".partial"));
    CHECK(!fs::exists(final_path));
  }
  SECTION("commit without a temp file fails") {
    h5::AtomicOutput out(final_path);
    std::string e = error_of([&] { out.commit(); });
    CHECK(contains(e, final_path + ".partial"));
    CHECK(contains(e, "does not exist"));
    CHECK(!out.committed());
  }
}

TEST_CASE("h5: rewrite in place and truncate (checkpoints and resumed traces)") {
  TempDir tmp;
  const std::string path = tmp.file("ckpt.h5");
  {
    h5::File f = h5::File::create(path);
    h5::Group root = f.root();
    root.write("ckpt/w", std::vector<float>(50000, 1.0f), h5::Dims{250, 200});
    f.flush();
  }
  const auto size0 = fs::file_size(path);
  {
    h5::File f = h5::File::open_rw(path);
    h5::Dataset w = f.root().open_dataset("ckpt/w");
    for (int k = 0; k < 20; ++k) w.rewrite(std::vector<float>(50000, static_cast<float>(k)));
    CHECK(contains(error_of([&] { w.rewrite(std::vector<float>(7, 0.0f)); }), "7 values for 50000 elements"));
    auto a = f.root().create_appendable<double>("trace/loss", {2});
    a.append(pattern<double>(10, 1));  // 5 rows
    a.truncate(3);
    CHECK(a.rows() == 3);
    a.append(pattern<double>(2, 9));
    CHECK(a.rows() == 4);
    CHECK(contains(error_of([&] { a.truncate(9); }), "it has 4"));
  }
  // Twenty rewrites of a 200 KB dataset did not grow the file by even one copy.
  CHECK(fs::file_size(path) < size0 + 200000);
  h5::File f = h5::File::open_read(path);
  const std::vector<float> w = f.root().read<float>("ckpt/w");
  CHECK(w.front() == 19.0f);
  CHECK(w.back() == 19.0f);
  const std::vector<double> l = f.root().read<double>("trace/loss");
  REQUIRE(l.size() == 8);
  CHECK(l[5] == pattern<double>(10, 1)[5]);
  CHECK(l[6] == pattern<double>(2, 9)[0]);
}

#if H5_VERSION_GE(1, 10, 5)
TEST_CASE("h5: a chunk damaged on disk fails its checksum instead of reading as other numbers") {
  TempDir tmp;
  const std::string p = (tmp.path / "damaged.h5").string();
  std::vector<double> rows(6000);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = 0.25 * static_cast<double>(i);
  {
    h5::File f = h5::File::create(p);
    auto a = f.root().create_appendable<double>("loss", {});
    a.append(rows);
    f.close();
  }
  haddr_t addr = 0;
  hsize_t size = 0;
  {
    h5::File f = h5::File::open_read(p);
    h5::Dataset d = f.root().open_dataset("loss");
    hid_t space = H5Dget_space(d.id());
    hsize_t offset[1] = {0};
    unsigned mask = 0;
    REQUIRE(H5Dget_chunk_info(d.id(), space, 0, offset, &mask, &addr, &size) >= 0);
    H5Sclose(space);
    CHECK(d.read<double>() == rows);
  }
  REQUIRE(size > 16);
  {  // one byte in the middle of the stored (compressed) chunk
    std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(addr + size / 2));
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    io.seekp(static_cast<std::streamoff>(addr + size / 2));
    io.write(&c, 1);
  }
  h5::File f = h5::File::open_read(p);
  try {
    const std::vector<double> back = f.root().read<double>("loss");
    FAIL("a damaged chunk was read without error (" << (back == rows ? "unchanged" : "different values") << ")");
  } catch (const h5::Error& e) {
    CHECK(std::string(e.what()).find("Fletcher32") != std::string::npos);
  }
}
#endif

TEST_CASE("h5: dimension scales name the axes (netCDF style) and survive appending and truncating") {
  TempDir tmp;
  const std::string path = tmp.file("dims.h5");
  {
    h5::File f = h5::File::create(path);
    h5::Group root = f.root();
    auto step = root.create_appendable<std::int64_t>("run/step", {});
    auto loss = root.create_appendable<double>("run/r/loss", {3});
    root.write("run/layer", std::vector<std::int64_t>{0, 1, 2});
    h5::Dataset layer = root.open_dataset("run/layer");
    CHECK_FALSE(step.is_scale());
    // Attaching something that is not a scale yet is refused by name.
    CHECK(contains(error_of([&] { loss.attach_scale(step, 0); }), "attach '/run/step' to axis 0 of dataset '/run/r/loss'"));
    CHECK(contains(error_of([&] { loss.attach_scale(step, 0); }), "it is not a dimension scale"));
    step.make_scale();
    layer.make_scale();
    CHECK(step.is_scale());
    CHECK(contains(error_of([&] { loss.attach_scale(layer, 2); }), "has 2 axes"));
    CHECK(contains(error_of([&] { layer.attach_scale(step, 0); }), "is itself a dimension scale"));
    CHECK(contains(error_of([&] { root.create_appendable<double>("run/m", {2, 2}).make_scale(); }),
                   "not one-dimensional"));
    CHECK(loss.dimension_labels() == std::vector<std::string>{"", ""});
    loss.attach_scale(step, 0);
    loss.attach_scale(layer, 1);
    CHECK(loss.dimension_labels() == std::vector<std::string>{"step", "layer"});
    step.append(std::vector<std::int64_t>{0, 1, 2});
    loss.append(pattern<double>(9, 1));
  }
  {
    // A resumed trace reopens, truncates and extends its datasets: the scales stay attached.
    h5::File f = h5::File::open_rw(path);
    h5::Group root = f.root();
    auto step = root.open_appendable<std::int64_t>("run/step");
    auto loss = root.open_appendable<double>("run/r/loss");
    step.truncate(1), loss.truncate(1);
    step.append(std::vector<std::int64_t>{5, 6});
    loss.append(pattern<double>(6, 2));
  }
  h5::File f = h5::File::open_read(path);
  h5::Dataset loss = f.root().open_dataset("run/r/loss");
  CHECK(loss.dimension_labels() == std::vector<std::string>{"step", "layer"});
  CHECK(loss.info().dims == h5::Dims{3, 3});
  // What HDF5's high-level library reads: the scale attached to each axis, and its name.
  const hid_t id = static_cast<hid_t>(loss.id());
  const hid_t step = H5Dopen2(static_cast<hid_t>(f.root().id()), "run/step", H5P_DEFAULT);
  const hid_t layer = H5Dopen2(static_cast<hid_t>(f.root().id()), "run/layer", H5P_DEFAULT);
  CHECK(H5DSis_attached(id, step, 0) > 0);
  CHECK(H5DSis_attached(id, layer, 1) > 0);
  CHECK(H5DSis_attached(id, layer, 0) == 0);
  char name[16] = {};
  CHECK(H5DSget_scale_name(step, name, sizeof name) == 4);
  CHECK(std::string(name) == "step");
  H5Dclose(step);
  H5Dclose(layer);
}

TEST_CASE("h5: a file another open file description holds HDF5's lock on is in use, not an error") {
  // HDF5 locks with flock(): exclusive to write, shared to read. A lock held past the short wait
  // is FileInUse (the file is fine, nothing changed); one let go during the wait is waited for.
  TempDir tmp;
  const std::string path = tmp.file("held.h5");
  h5::File::create(path).root().set_attr("status", std::string("running"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_SH) == 0);  // a reader
  CHECK(h5::File::open_read(path).root().get_attr_string("status") == "running");  // readers share
  std::string what;
  try {
    (void)h5::File::open_rw(path, h5::StaleWriter::Refuse);
  } catch (const h5::FileInUse& e) {
    what = e.what();
  }
  CHECK(what.find("another process has it open") != std::string::npos);
  CHECK(what.find("nothing was changed") != std::string::npos);
  REQUIRE(::flock(fd, LOCK_EX) == 0);  // a writer: reading is refused too
  CHECK_THROWS_AS(h5::File::open_read(path), h5::FileInUse);
  // A jthread: if the open throws, the release is still joined and the failure is reported.
  std::jthread release([fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::close(fd);
  });
  h5::File f = h5::File::open_rw(path, h5::StaleWriter::Refuse);  // waits for the release
  release.join();
  CHECK(f.root().get_attr_string("status") == "running");
}

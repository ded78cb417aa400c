# The Python extension headcount._headcount (nanobind), linked against the same static
# library as the CLI and the tests:
#   - in a build tree: -DHEADCOUNT_PYTHON=ON [-DPython_EXECUTABLE=.venv/bin/python] builds
#     <build>/python/headcount/ (the extension, the package's .py files copied beside it, and
#     the generated _headcount.pyi), importable with PYTHONPATH=<build>/python;
#   - under scikit-build-core (`pip install .`, `pip wheel .`; pyproject.toml): on by
#     default, and `cmake --install --component python` puts the extension and its stub into
#     the wheel's headcount/ package, beside python/headcount/*.py.
# nanobind comes from the Python environment (PyPI's nanobind, pinned in pyproject.toml and
# scripts/setup.sh): `python -m nanobind --cmake_dir`.
if(DEFINED SKBUILD)
  # A wheel needs the library and the extension only: the CLI is not built.
  set_target_properties(headcount_cli PROPERTIES EXCLUDE_FROM_ALL ON)
  set(HEADCOUNT_PYTHON_DEFAULT ON)
else()
  set(HEADCOUNT_PYTHON_DEFAULT OFF)
endif()
option(HEADCOUNT_PYTHON "Build the Python extension (needs nanobind in Python_EXECUTABLE's environment)"
       ${HEADCOUNT_PYTHON_DEFAULT})
if(NOT HEADCOUNT_PYTHON)
  return()
endif()

find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
execute_process(COMMAND ${Python_EXECUTABLE} -m nanobind --cmake_dir
                OUTPUT_VARIABLE HEADCOUNT_NANOBIND_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE HEADCOUNT_NANOBIND_RC)
if(NOT HEADCOUNT_NANOBIND_RC EQUAL 0)
  message(FATAL_ERROR "HEADCOUNT_PYTHON: ${Python_EXECUTABLE} has no nanobind (scripts/setup.sh installs it into .venv)")
endif()
find_package(nanobind CONFIG REQUIRED PATHS ${HEADCOUNT_NANOBIND_DIR} NO_DEFAULT_PATH)

file(GLOB HEADCOUNT_PY_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/src/*.cpp)
# NB_STATIC: nanobind's runtime linked in, so the extension is one self-contained file;
# NOMINSIZE: the bindings are the call path whose overhead bench/python_overhead.py measures.
nanobind_add_module(_headcount NB_STATIC NOMINSIZE ${HEADCOUNT_PY_SOURCES})
target_include_directories(_headcount PRIVATE ${PROJECT_SOURCE_DIR}/python/src)
target_link_libraries(_headcount PRIVATE headcount)
target_compile_options(_headcount PRIVATE -Wall -Wextra -Wno-missing-field-initializers)

if(DEFINED SKBUILD)
  install(TARGETS _headcount LIBRARY DESTINATION headcount COMPONENT python)
  nanobind_add_stub(_headcount_stub INSTALL_TIME MODULE headcount._headcount
                    OUTPUT headcount/_headcount.pyi PYTHON_PATH headcount/.. COMPONENT python)
else()
  set(HEADCOUNT_PY_PACKAGE ${PROJECT_BINARY_DIR}/python/headcount)
  set_target_properties(_headcount PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${HEADCOUNT_PY_PACKAGE})
  # The pure-Python half of the package beside the extension; configure_file re-copies a
  # file (and re-runs CMake) whenever it changes.
  file(GLOB HEADCOUNT_PY_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/headcount/*)
  foreach(file IN LISTS HEADCOUNT_PY_FILES)
    get_filename_component(name ${file} NAME)
    if(NOT IS_DIRECTORY ${file})
      configure_file(${file} ${HEADCOUNT_PY_PACKAGE}/${name} COPYONLY)
    endif()
  endforeach()
  nanobind_add_stub(_headcount_stub MODULE headcount._headcount
                    OUTPUT ${HEADCOUNT_PY_PACKAGE}/_headcount.pyi
                    PYTHON_PATH ${PROJECT_BINARY_DIR}/python DEPENDS _headcount)
endif()

# HEADCOUNT_MPI=ON: attention split over MPI ranks (include/headcount/distributed.h).
#  - headcount_distributed: src/distributed/*.cpp over the headcount library and MPI's C API.
#    A separate library, so the headcount library, the Python extension and every
#    single-process user are the same with or without it.
#  - the CLI links it and gains `headcount attention --distributed heads|ring`, `embed
#    --distributed` and `train --parallel data` (under mpirun).
#  - headcount_mpi_tests (tests/mpi/), run by CTest under mpirun for 1 to 4 ranks.
# The C API, used from C++ (the project enables no C); without the deprecated C++ bindings.
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI REQUIRED COMPONENTS CXX)

file(GLOB HEADCOUNT_DISTRIBUTED_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/distributed/*.cpp)
add_library(headcount_distributed STATIC ${HEADCOUNT_DISTRIBUTED_SOURCES})
target_include_directories(headcount_distributed PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(headcount_distributed PUBLIC headcount MPI::MPI_CXX)
target_compile_options(headcount_distributed PRIVATE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)

file(GLOB HEADCOUNT_CLI_DISTRIBUTED_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tools/headcount/distributed/*.cpp)
target_sources(headcount_cli PRIVATE ${HEADCOUNT_CLI_DISTRIBUTED_SOURCES})
target_compile_definitions(headcount_cli PRIVATE HEADCOUNT_HAVE_MPI=1)
target_include_directories(headcount_cli PRIVATE ${PROJECT_SOURCE_DIR}/tools/headcount)
target_link_libraries(headcount_cli PRIVATE headcount_distributed)

# Open MPI refuses to start as root unless told twice; the variables are harmless otherwise, so
# the tests run the same as root (CI containers) and as a user.
set(HEADCOUNT_MPIRUN_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
# --oversubscribe: 4 ranks on a 2-core machine.
set(HEADCOUNT_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe)

if(HEADCOUNT_BUILD_TESTS)
  file(GLOB HEADCOUNT_MPI_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/mpi/*.cpp)
  add_executable(headcount_mpi_tests ${HEADCOUNT_MPI_TEST_SOURCES})
  target_include_directories(headcount_mpi_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(headcount_mpi_tests PRIVATE headcount_distributed GTest::gtest)
  foreach(ranks 1 2 3 4)
    add_test(NAME mpi_attention_np${ranks}
             COMMAND ${HEADCOUNT_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} ${ranks} $<TARGET_FILE:headcount_mpi_tests>)
    set_tests_properties(mpi_attention_np${ranks} PROPERTIES ENVIRONMENT "${HEADCOUNT_MPIRUN_ENV}" TIMEOUT 300)
  endforeach()
endif()

# The command under mpirun (against the one-process command), and a rank killed mid-run. The
# scripts need NumPy: Debian's python3 (HEADCOUNT_NUMPY_PYTHON, found in CMakeLists.txt).
if(HEADCOUNT_BUILD_TESTS)
  foreach(ranks 1 2 3 4)
    add_test(NAME mpi_cli_attention_np${ranks}
             COMMAND ${HEADCOUNT_NUMPY_PYTHON} ${PROJECT_SOURCE_DIR}/tests/mpi/cli_distributed_check.py
                     $<TARGET_FILE:headcount_cli> ${MPIEXEC_EXECUTABLE} ${ranks})
    set_tests_properties(mpi_cli_attention_np${ranks} PROPERTIES TIMEOUT 300)
  endforeach()
  # embed --distributed and train --parallel data against one process.
  foreach(ranks 1 2 3)
    add_test(NAME mpi_cli_data_np${ranks}
             COMMAND ${HEADCOUNT_NUMPY_PYTHON} ${PROJECT_SOURCE_DIR}/tests/mpi/cli_data_check.py
                     $<TARGET_FILE:headcount_cli> ${MPIEXEC_EXECUTABLE} ${ranks})
    set_tests_properties(mpi_cli_data_np${ranks} PROPERTIES TIMEOUT 300)
  endforeach()
  # A rank stopped (SIGSTOP) mid-training: the watchdog ends the job, naming it.
  add_test(NAME mpi_rank_hung
           COMMAND ${HEADCOUNT_NUMPY_PYTHON} ${PROJECT_SOURCE_DIR}/tests/mpi/rank_hang_check.py
                   $<TARGET_FILE:headcount_cli> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(mpi_rank_hung PROPERTIES TIMEOUT 180)
  add_test(NAME mpi_rank_killed
           COMMAND ${HEADCOUNT_NUMPY_PYTHON} ${PROJECT_SOURCE_DIR}/tests/mpi/rank_kill_check.py
                   $<TARGET_FILE:headcount_cli> ${MPIEXEC_EXECUTABLE})
  set_tests_properties(mpi_rank_killed PROPERTIES TIMEOUT 180)
endif()

# A measurement, not a test (bench/README.md): ring attention at a long sequence against one process.
add_executable(headcount_ring_bench ${PROJECT_SOURCE_DIR}/bench/ring_attention.cpp)
target_link_libraries(headcount_ring_bench PRIVATE headcount_distributed)

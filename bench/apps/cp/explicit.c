/* bench/apps/cp/explicit.c -- cp with device buffers and copies by hand (the original's shape). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/cp/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "cp", "explicit", argc, argv);
    if (run.gen) {
        cp_generate(&run);
        return 0;
    }
    cp_size s = cp_size_of(&run);
    size_t atoms_bytes = (size_t)s.natoms * 4 * sizeof(float), grid_bytes = (size_t)s.nx * s.ny * sizeof(float);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    cp_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    float *atoms = adsm_host_alloc(atoms_bytes), *energy = adsm_host_alloc(grid_bytes);
    FILE *in = app_open(&run, "atoms.bin", "rb");
    if (fread(atoms, 1, atoms_bytes, in) != atoms_bytes) app_die("cp: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    float *d_atoms = adsm_dev_alloc((size_t)s.chunk * 4 * sizeof(float)), *d_energy = adsm_dev_alloc(grid_bytes);
    if (!d_atoms || !d_energy) app_die(adsm_last_error());
    adsm_memset(d_energy, 0, grid_bytes);
    for (int first = 0; first < s.natoms; first += s.chunk) {
        int count = s.natoms - first < s.chunk ? s.natoms - first : s.chunk;
        adsm_copy_to_device(d_atoms, atoms + 4 * (size_t)first, (size_t)count * 4 * sizeof(float));
        ADSM_CALL(cp_slice, cp_grid(s), d_energy, d_atoms, count, s.nx, s.ny, s.spacing, s.z);
    }
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(energy, d_energy, grid_bytes);
    adsm_dev_free(d_atoms);
    adsm_dev_free(d_energy);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "energy.out", "wb");
    app_fwrite(energy, 1, grid_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, cp_check(&run, energy));
    adsm_host_free(atoms);
    adsm_host_free(energy);
    adsm_shutdown();
    return rc;
}

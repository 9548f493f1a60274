/*
 * dumpcmp.c — compares two tempo-train --dump files (step 0's loss and full gradient) for the
 * layout tests: prints the relative loss difference and the worst gradient element, and exits 0
 * if both are within TOL, 1 if not, 2 on a bad file.
 *
 * An element passes when |a - b| <= TOL * max(|b|, rms(b)): relative to itself, with the
 * gradient's root-mean-square as the floor for elements near zero (whose relative error says
 * nothing about the summation-order noise they carry).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float *load(const char *path, double *loss, size_t *n)
{
    FILE *f = fopen(path, "rb");
    double hdr[2];
    if (!f || fread(hdr, sizeof hdr, 1, f) != 1 || !(hdr[1] > 0)) {
        fprintf(stderr, "dumpcmp: cannot read %s\n", path);
        exit(2);
    }
    *loss = hdr[0];
    *n = (size_t)hdr[1];
    float *g = malloc(*n * sizeof(float));
    if (!g || fread(g, sizeof(float), *n, f) != *n) {
        fprintf(stderr, "dumpcmp: %s is truncated\n", path);
        exit(2);
    }
    fclose(f);
    return g;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: dumpcmp REF.bin OTHER.bin TOL\n");
        return 2;
    }
    double la, lb, tol = atof(argv[3]);
    size_t na, nb;
    float *b = load(argv[1], &lb, &nb), *a = load(argv[2], &la, &na);
    if (na != nb) {
        fprintf(stderr, "dumpcmp: %zu vs %zu parameters\n", nb, na);
        return 2;
    }
    double ss = 0;
    for (size_t i = 0; i < nb; i++) {
        ss += (double)b[i] * b[i];
    }
    double rms = sqrt(ss / (double)nb), worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < nb; i++) {
        double fl = fabs(b[i]) > rms ? fabs(b[i]) : rms, e = fabs((double)a[i] - b[i]) / fl;
        if (e > worst || e != e) {
            worst = e;
            wi = i;
        }
    }
    double le = fabs(la - lb) / fabs(lb);
    printf("loss %.9g vs %.9g (rel %.3g); gradient: worst element %zu: %.9g vs %.9g (rel %.3g, "
           "rms %.3g)\n",
           la, lb, le, wi, a[wi], b[wi], worst, rms);
    free(a);
    free(b);
    return le <= tol && worst <= tol ? 0 : 1;
}
